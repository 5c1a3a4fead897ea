"""Build `src/memoryd/extraction/data/aliases.jsonl`: the names engineers type for common
tools, services and terms ("k8s", "GHA", "EKS", "SBOM"), one entity per thing.

    npm pack simple-icons@16.37.0 linguist-languages@9.5.0      # in /tmp/kx_src, unpacked
    pip download --no-deps botocore==1.44.8                     # in /tmp/kx_src/botocore, unzipped
    .venv/bin/python scripts/build_aliases.py --sources /tmp/kx_src

Sources (build time only, nothing is downloaded at run time):

- botocore 1.44.8 (Apache-2.0): each AWS service's `serviceAbbreviation` and
  `serviceFullName` (`Amazon EKS`, `Amazon Elastic Kubernetes Service`). A service becomes
  an entity when its abbreviation is an acronym (`Amazon ECR` → `ECR`) or a CamelCase word
  (`DynamoDB`), the forms engineers write bare; otherwise only its full name counts.
- linguist-languages 9.5.0 (MIT; GitHub Linguist's `languages.yml`): aliases of the
  languages the lexicon already lists (`golang`, `rlang`), 3 characters or more.
- simple-icons 16.37.0 (CC0-1.0): `aka` aliases of brands the lexicon already lists
  (`Express.js`, `11ty`), and the check that each curated abbreviation's target is spelled as
  its brand spells it.
- the CNCF landscape's `landscape.yml` (Apache-2.0), the item names of its "Continuous
  Integration & Delivery" subcategory (`LANDSCAPE_CI`, copied at `LANDSCAPE_COMMIT`): kind
  `ci` for build-and-test systems, of which a repository has one (so "switch to GitHub
  Actions" finds the older record's Concourse), `cd` for the deployment tools run beside one.
- `ABBREVIATIONS` below: the short forms none of these lists ("k8s", "GHA", "TF", "CI"),
  each mapped to a name of the lexicon or of the sources above; `CONCEPTS`: standards and
  practices named by an acronym (TLS, SBOM, CI/CD).

Every alias is checked against every surface of `lexicon.jsonl` and of the other rows: one
that already names another entity is dropped and reported, so no surface names two things.
Surfaces that are ambiguous in prose carry `cues`: they count only when one of the cue
words also stands in the same text ("TF" is Terraform next to "terraform", "plan", "HCL";
"pg" is PostgreSQL next to "sql", "database", "postgres"). Left out: "mw" (middleware is a
common noun, "MW" megawatts), "CD" (`cd` the shell command), "CF" (CloudFormation,
Cloudflare or CloudFront), "ES" alone (ES modules, ES2015, Spanish) unless Elasticsearch cues
are present. Two runs give the same file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("build_aliases")
ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "src" / "memoryd" / "extraction" / "data"
SI_VERSION = "16.37.0"
LINGUIST_VERSION = "9.5.0"
BOTOCORE_VERSION = "1.44.8"

AWS_SERVICES = (
    "acm", "apigateway", "appsync", "athena", "batch", "cloudformation", "cloudfront",
    "cloudtrail", "cloudwatch", "codebuild", "codepipeline", "cognito-idp", "dynamodb", "ec2",
    "ecr", "ecs", "efs", "eks", "elasticache", "emr", "events", "glue", "guardduty", "iam",
    "kinesis", "kms", "lambda", "lightsail", "opensearch", "rds", "redshift", "route53", "s3",
    "sagemaker", "secretsmanager", "ses", "sns", "sqs", "ssm", "stepfunctions", "sts",
)  # fmt: skip
"""The AWS services that engineering text names most (botocore directory names)."""

NAMES = {"stepfunctions": "AWS Step Functions", "acm": "AWS Certificate Manager"}
"""Services whose abbreviation is no name their users write ("AWS SFN")."""
AWS_CUES = ("aws", "amazon", "iam", "s3", "ec2", "lambda", "cloudformation", "terraform", "arn")

TF_CUES = tuple(
    [
        "terraform",
        "hcl",
        "tfstate",
        "tfvars",
        "provider",
        "providers",
        "module",
        "modules",
        "plan",
        "apply",
        "state",
        "infra",
        "infrastructure",
        "iac",
        "aws",
        "gcp",
        "azure",
        "opentofu",
        "terragrunt",
    ]
)
ES_CUES = tuple(
    [
        "elasticsearch",
        "elastic",
        "kibana",
        "logstash",
        "elk",
        "opensearch",
        "index",
        "indices",
        "shard",
        "shards",
        "cluster",
        "query",
        "mapping",
        "mappings",
    ]
)
PG_CUES = tuple(
    [
        "postgres",
        "postgresql",
        "sql",
        "database",
        "db",
        "psql",
        "query",
        "schema",
        "table",
        "tables",
        "replica",
        "migration",
        "migrations",
    ]
)
Surfaces = list[str | tuple[str, tuple[str, ...]]]
"""Surfaces of one entity; a (surface, cue words) pair is an ambiguous one."""

ABBREVIATIONS: dict[str, Surfaces] = {
    # target name (a lexicon entry, or a row built below) -> surfaces, optionally with cues
    "Kubernetes": ["k8s", "K8s", "K8S"],
    "GitHub Actions": ["GHA", "GH Actions", "GitHub Action"],
    "Terraform": [("TF", TF_CUES)],
    "Elasticsearch": [("ES", ES_CUES)],
    "PostgreSQL": ["psql", "PostgresQL", "Postgresql", ("pg", PG_CUES), ("PG", PG_CUES)],
    "MongoDB": ["mongodb"],
    "TypeScript": ["TS"],
    "JavaScript": ["JS"],
    "GitLab CI": ["GitLab CI/CD", "gitlab-ci"],
    "Google Kubernetes Engine": ["GKE"],
    "Azure Kubernetes Service": ["AKS"],
    "Google Cloud Storage": ["GCS"],
    "Argo CD": ["ArgoCD", "argocd"],
    "DynamoDB": ["DDB"],
}

CONCEPTS: list[tuple[str, str, Surfaces]] = [
    # (name, kind, surfaces): standards and practices engineers name by an acronym
    ("TLS", "protocol", ["Transport Layer Security"]),
    ("mTLS", "protocol", ["mutual TLS", "Mutual TLS"]),
    ("SSL", "protocol", ["Secure Sockets Layer"]),
    ("SSH", "protocol", ["Secure Shell"]),
    ("DNS", "protocol", ["Domain Name System"]),
    ("HTTP/2", "protocol", ["HTTP2"]),
    ("SAML", "protocol", ["Security Assertion Markup Language"]),
    ("OpenID Connect", "protocol", ["OIDC"]),
    ("SSO", "practice", ["single sign-on", "Single Sign-On", "single sign on"]),
    ("RBAC", "practice", ["role-based access control", "Role-Based Access Control"]),
    ("CORS", "protocol", ["Cross-Origin Resource Sharing", "cross-origin resource sharing"]),
    ("SBOM", "standard", ["SBOMs", "software bill of materials", "Software Bill of Materials"]),
    ("SPDX", "standard", []),
    ("CycloneDX", "standard", []),
    ("SLSA", "standard", []),
    ("CVE", "standard", ["CVEs"]),
    ("Semantic Versioning", "standard", ["SemVer", "semver"]),
    ("Continuous integration", "practice", ["CI", "continuous integration"]),
    ("Continuous delivery", "practice", ["continuous delivery", "continuous deployment"]),
    ("CI/CD", "practice", ["CICD", "CI-CD"]),
    ("Infrastructure as code", "practice", ["IaC", "infrastructure as code"]),
    ("GitOps", "practice", []),
]

DEVTOOLS: list[tuple[str, str, str, list[str]]] = [
    # (name, type, kind, surfaces): targets of ABBREVIATIONS the lexicon lacks
    ("GitLab CI", "tool", "ci", []),
    ("Google Kubernetes Engine", "tool", "cloud-service", []),
    ("Azure Kubernetes Service", "tool", "cloud-service", []),
    ("Google Cloud Storage", "tool", "cloud-service", []),
    ("Argo CD", "tool", "devtool", []),
]


LANDSCAPE_COMMIT = "0006137a90591fa6455095d56dc261f8f0ba27d3"
LANDSCAPE_CI = (
    "Agola", "Appveyor", "Argo", "AWS CodePipeline", "Azure Pipelines", "Bamboo", "Brigade",
    "Buildkite", "CircleCI", "Cloud 66 Skycap", "Cloudbees Codeship", "Codefresh", "Concourse",
    "D2iQ Dispatch", "Drone", "Flux", "GitHub Actions", "GitLab", "GoCD", "Google Cloud Build",
    "Harness.io", "HyScale", "Jenkins", "JenkinsX", "Keptn", "Octopus Deploy", "Razee",
    "Screwdriver", "Semaphore", "Spinnaker", "TeamCity", "Tekton Pipelines", "Travis CI",
    "Weave Flagger", "werf", "XL Deploy",
)  # fmt: skip
"""The item names of the CNCF landscape's (Apache-2.0) "Continuous Integration & Delivery"
subcategory, `landscape.yml` at `LANDSCAPE_COMMIT`, in its order."""

LANDSCAPE_DELIVERY = frozenset(
    {
        "Argo", "Cloud 66 Skycap", "D2iQ Dispatch", "Flux", "Harness.io", "HyScale", "Keptn",
        "Octopus Deploy", "Razee", "Spinnaker", "Weave Flagger", "werf", "XL Deploy",
    }
)  # fmt: skip
"""The subcategory's deployment tools (GitOps, release orchestration, canaries): a repository
runs one of them beside its CI system, so they are kind `cd`, not the single-valued `ci`."""

LANDSCAPE_SKIP = frozenset({"GitLab"})
"""A forge first (the lexicon's devtool GitLab); its CI is the row `GitLab CI`."""


def landscape_ci_rows(nouns: set[str]) -> list[tuple[str, Surfaces, str]]:
    """(name, surfaces, kind) of the landscape's CI & Delivery items. A name that is an
    everyday noun ("Concourse", "Drone", "Semaphore") is no name alone in prose: it counts
    as "<name> CI", the form its users write, and in its own capitalised case."""
    rows: list[tuple[str, Surfaces, str]] = []
    for name in LANDSCAPE_CI:
        if name in LANDSCAPE_SKIP:
            continue
        kind = "cd" if name in LANDSCAPE_DELIVERY else "ci"
        surfaces: Surfaces = []
        if kind == "ci" and name.casefold() in nouns:
            surfaces.append(f"{name} CI")
        rows.append((name, surfaces, kind))
    return rows


def _acronym(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z0-9]{1,5}", word))


def _camel(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][A-Za-z0-9]*)+", word))


def aws_rows(botocore_data: Path) -> list[dict[str, Any]]:
    """One row per service of `AWS_SERVICES`, named by its abbreviation."""
    rows = []
    for service in AWS_SERVICES:
        versions = sorted(p for p in (botocore_data / service).iterdir() if p.is_dir())
        path = next(versions[-1].glob("service-2.json*"))
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        meta = json.loads(raw)["metadata"]
        full = str(meta["serviceFullName"]).replace("(SSM)", "").strip()
        vendor = "AWS" if full.startswith("AWS") else "Amazon"
        abbrev = str(meta.get("serviceAbbreviation") or "")
        bare = re.sub(r"^(Amazon|AWS)\s*", "", abbrev or full)
        bare = re.sub(r"\s+Service$", "", bare)
        long_name = re.sub(r"\s+Service$", "", re.sub(r"^(Amazon|AWS)\s*", "", full))
        # the short name AWS gives it ("Amazon EKS", "DynamoDB"), else its full name
        name = NAMES.get(service) or (
            f"{vendor} {bare}" if _acronym(bare) or _camel(bare) else f"{vendor} {long_name}"
        )
        surfaces = [full, f"{vendor} {bare}", f"AWS {bare}", f"Amazon {bare}"]
        cues: dict[str, list[str]] = {}
        if _acronym(bare) or _camel(bare):
            surfaces.append(bare)
            if _acronym(bare) and len(bare) <= 3 and bare not in {"EKS", "ECR", "ECS", "EC2"}:
                # "ACM", "KMS", "SES", "SNS": other meanings outside AWS text
                cues[bare] = [c for c in AWS_CUES if c != bare.casefold()]
        rows.append(
            {
                "name": name,
                "type": "tool",
                "kind": "cloud-service",
                "aliases": surfaces,
                "source": "botocore",
                **({"cues": cues} if cues else {}),
            }
        )
    return rows


def _split(surfaces: Surfaces) -> tuple[list[str], dict[str, list[str]]]:
    plain: list[str] = []
    cues: dict[str, list[str]] = {}
    for item in surfaces:
        if isinstance(item, tuple):
            plain.append(item[0])
            cues[item[0]] = sorted(item[1])
        else:
            plain.append(item)
    return plain, cues


def linguist_aliases(
    linguist_data: Path, names: set[str], common: set[str]
) -> dict[str, list[str]]:
    """Aliases of the languages the lexicon lists, by language name."""
    out: dict[str, list[str]] = {}
    for path in sorted(linguist_data.glob("*.js")):
        text = path.read_text(encoding="utf-8")
        name = re.search(r"^\s*name: '((?:[^'\\]|\\.)*)'", text, re.M)
        aliases = re.search(r"^\s*aliases: \[([^\]]*)\]", text, re.M)
        if name is None or aliases is None or name.group(1) not in names:
            continue
        found = re.findall(r"'((?:[^'\\]|\\.)*)'", aliases.group(1))
        stem = name.group(1).lower().replace("#", "sharp").replace("+", "p")[:2]
        # a spelling of the name ("golang", "csharp", "py3"), not another tool or dialect
        # that Linguist files under it ("node", "rake", "jruby", "xhtml")
        keep = [
            a
            for a in found
            if len(a) >= 3 and a.startswith(stem) and a.lower() not in common and " " not in a
        ]
        if keep:
            out[name.group(1)] = keep
    return out


def simple_icons_aka(si_json: Path, names: set[str]) -> tuple[dict[str, list[str]], set[str]]:
    """`aka` aliases of brands the lexicon lists, and all brand titles."""
    icons = json.loads(si_json.read_text(encoding="utf-8"))
    titles = {str(icon["title"]) for icon in icons}
    out: dict[str, list[str]] = {}
    for icon in icons:
        aka = icon.get("aliases", {}).get("aka", [])
        if icon["title"] in names and aka:
            out[str(icon["title"])] = [str(a) for a in aka]
    return out, titles


class Rows:
    """The rows built so far, and every surface the lexicon or a row already gives someone."""

    def __init__(self, lexicon: list[dict[str, Any]]) -> None:
        self.by_name = {str(e["name"]): e for e in lexicon}
        self.owner: dict[str, str] = {}  # casefolded surface -> entity name
        for entry in lexicon:
            for surface in (entry["name"], *entry.get("aliases", [])):
                self.owner.setdefault(str(surface).casefold(), str(entry["name"]))
        self.rows: dict[str, dict[str, Any]] = {}
        self.report: list[str] = []

    def _target(self, name: str, surfaces: list[str]) -> tuple[str, dict[str, Any] | None]:
        """The lexicon entry a row adds to: its own name's, or a curated entry that already
        holds one of its surfaces (one thing, one entity)."""
        if name in self.by_name:
            return name, self.by_name[name]
        for surface in (name, *surfaces):
            hit = self.owner.get(surface.casefold())
            if hit is not None and self.by_name.get(hit, {}).get("source") == "curated":
                return hit, self.by_name[hit]
        return name, None

    def add(
        self,
        name: str,
        source: str,
        surfaces: Surfaces,
        etype: str = "",
        kind: str = "",
    ) -> None:
        plain, cues = _split(surfaces)
        name, target = self._target(name, plain)
        row = self.rows.setdefault(
            name,
            {
                "name": name,
                "type": str(target["type"]) if target else etype,
                "kind": str(target.get("kind", kind)) if target else kind,
                "aliases": [],
                "source": source,
            },
        )
        if source not in str(row["source"]).split("+"):
            row["source"] = f"{row['source']}+{source}"
        held = {str(h) for h in ((target["name"], *target.get("aliases", [])) if target else ())}
        held_folded = {h.casefold() for h in held}
        for surface in (name, *plain):
            folded = surface.casefold()
            owner = self.owner.get(folded)
            if owner is not None and owner != name:
                self.report.append(f"dropped {surface!r} for {name}: already names {owner}")
                continue
            self.owner[folded] = name
            if surface == name or surface in row["aliases"] or surface in held:
                continue
            if len(surface) >= 4 and not surface.isupper() and folded in held_folded:
                continue  # matched in any case already
            row["aliases"].append(surface)
        for surface, words in cues.items():
            if surface in row["aliases"]:
                row.setdefault("cues", {})[surface] = words


def build(sources: Path) -> tuple[list[dict[str, Any]], list[str]]:
    lexicon = [
        json.loads(line)
        for line in (DATA / "lexicon.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    common = set((DATA / "common_words.txt").read_text(encoding="utf-8").split())
    built = Rows(lexicon)
    for row in aws_rows(sources / "botocore" / "botocore" / "data"):
        cued = dict(row.get("cues", {}))
        built.add(
            str(row["name"]),
            "botocore",
            [(a, tuple(cued[a])) if a in cued else a for a in row["aliases"]],
            "tool",
            "cloud-service",
        )
    for name, etype, kind, surfaces in DEVTOOLS:
        built.add(name, "curated", list(surfaces), etype, kind)
    nouns = set((DATA / "everyday_nouns.txt").read_text(encoding="utf-8").split())
    for name, landscape_surfaces, kind in landscape_ci_rows(nouns):
        built.add(name, "cncf-landscape", landscape_surfaces, "tool", kind)
    for name, kind, concept_surfaces in CONCEPTS:
        built.add(name, "curated", concept_surfaces, "concept", kind)
    si_aka, titles = simple_icons_aka(
        sources / f"simple-icons-{SI_VERSION}" / "package" / "data" / "simple-icons.json",
        set(built.by_name),
    )
    for name, aka in sorted(si_aka.items()):
        built.add(name, "simple-icons", list(aka))
    languages = {str(e["name"]) for e in lexicon if e.get("kind") == "language"}
    linguist = sources / f"linguist-languages-{LINGUIST_VERSION}" / "package" / "data"
    for name, spelled in sorted(linguist_aliases(linguist, languages, common).items()):
        built.add(name, "linguist", list(spelled))
    for name, abbrev_surfaces in ABBREVIATIONS.items():
        if name not in built.by_name and name not in built.rows:
            raise SystemExit(f"abbreviation target {name!r} is neither in the lexicon nor built")
        curated = built.by_name.get(name, {}).get("source") == "curated"
        if curated and name not in titles:
            built.report.append(f"note: {name} is no simple-icons title")
        built.add(name, "curated", abbrev_surfaces)
    out = []
    for row in built.rows.values():
        if not row["aliases"] and row["name"] in built.by_name:
            continue
        exact = [a for a in row["aliases"] if len(a) >= 4 and (a.isupper() or a in common)]
        if row["name"] not in built.by_name and str(row["name"]).casefold() in nouns:
            exact.append(str(row["name"]))  # "Concourse", never "the concourse"
        if exact:
            row["case_sensitive"] = sorted(exact)
        out.append(row)
    out.sort(key=lambda r: (str(r["type"]), str(r["name"]).casefold()))
    return out, built.report


HEADER = {
    "_header": (
        "Built by scripts/build_aliases.py; do not edit by hand. Sources: botocore "
        f"{BOTOCORE_VERSION} (Apache-2.0, AWS service names), linguist-languages "
        f"{LINGUIST_VERSION} (MIT, GitHub Linguist language aliases), simple-icons {SI_VERSION} "
        "(CC0-1.0, brand aliases), the CNCF landscape at "
        f"{LANDSCAPE_COMMIT[:12]} (Apache-2.0, CI and delivery systems), and the script's "
        "curated abbreviations. Each row adds aliases to the lexicon entry of the same name, or "
        "is a new entry."
    )
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=Path("/tmp/kx_src"))
    parser.add_argument("--out", type=Path, default=DATA / "aliases.jsonl")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows, report = build(args.sources)
    lines = [json.dumps(HEADER, ensure_ascii=False)]
    lines += [json.dumps(row, ensure_ascii=False) for row in rows]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for line in report:
        log.info("%s", line)
    surfaces = sum(len(r["aliases"]) for r in rows)
    log.info("%d rows, %d aliases -> %s", len(rows), surfaces, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
