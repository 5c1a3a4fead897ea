"""Supersede judging through the service: whether a new memory replaces older ones, and the
human's decisions on candidates (the rules and the LLM judge live in
`memoryd.governance.supersede`; these are the thin methods).

Over 600 lines: one memory's judging and a write batch's (status lines, pairs, every decision
in one write) share their steps, and the human's decisions on candidates sit beside them."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Collection, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.domain.core import SUPERSEDE_BULK_LIMIT
from memoryd.domain.superseding_batch import BatchJudging
from memoryd.errors import InvalidInput, MemorydError, NotFound, PolicyDenied
from memoryd.governance.store import EnrichmentState, JudgeRow
from memoryd.graph.rows import graph_rows
from memoryd.graph.store import SupersedeRow
from memoryd.memfile import lock_file
from memoryd.models import Memory, Predicate, RelationRef, SupersedeDecision, SupersedeStatus
from memoryd.redact.fields import clean_stored

if TYPE_CHECKING:
    from memoryd.governance import status_lines, supersede

logger = logging.getLogger(__name__)

APPLY_BATCH = 200
"""Newer memories whose supersede decisions are written in one write (and hold their file
locks together)."""


SPEAKER_SCAN_TIMEOUT_MS = 300_000
"""The one scan of a scope for bodies with a status word (`_speakers`): at 100k memories it
ran past the store's 10 s query limit under load, and every write to the scope was then
judged without its status lines (bench/RESULTS.md)."""


@functools.lru_cache(maxsize=4096)
def _status_lines_of(body: str) -> tuple[status_lines.StatusLine, ...]:
    """A speaker's status lines, parsed once per body: every write to its scope asks."""
    from memoryd.governance import status_lines

    return tuple(status_lines.status_lines(body))


def _names(ref: status_lines.Ref, numbers: set[int], keys: set[str]) -> bool:
    """Whether a status line's reference names a record going by one of these numbers or
    title keys (`status_lines.resolve` finds a record by nothing else)."""
    if ref.number is not None and ref.number in numbers:
        return True
    return bool(ref.key) and any(k == ref.key or k.startswith(f"{ref.key}-") for k in keys)


class Superseding(BatchJudging):
    """Judge supersedes and decide candidates."""

    # -- supersede judging (memoryd.governance.supersede) ---------------------------------
    @property
    def supersede_tiers(self) -> supersede.Tiers:
        from memoryd.governance import supersede

        cfg = self.supersede_settings
        return supersede.Tiers(auto=cfg.auto_threshold, candidate=cfg.candidate_threshold)

    def prepare_supersede(
        self,
        slug: str,
        pairs: list[supersede.Pair] | None = None,
        *,
        written: Memory | None = None,
    ) -> supersede.SupersedeJob | None:
        """A read: the older memories this one may replace, with the rules' verdicts; None
        when there is nothing to judge (a sensitive memory's text never leaves its file).
        `pairs`: found already for a batch (`find_pairs_many`); `written`: the memory as the
        batch just wrote it (judging reads its title, body and type, which no decision
        changes), else read from its file."""
        from memoryd.governance import supersede
        from memoryd.governance.analyze import sensitive

        memory = self._load(slug) if written is None else written
        scope = self.vault.read_scope(memory.meta.scope_hash)
        if sensitive(memory, scope):
            return None
        if pairs is None:
            limit = self.supersede_settings.max_pairs
            pairs = supersede.find_pairs(self.graph, memory, limit=limit)
        if not pairs:
            return None
        text = supersede.pair_texts(memory.meta.title, memory.body)
        job = supersede.SupersedeJob(slug, text, pairs, session=memory.meta.type.value == "session")
        supersede.judge_pairs(job)
        return job

    def judge_supersedes_llm(self, job: supersede.SupersedeJob) -> None:
        """The LLM judge on the pairs the rules left (no store is touched: the daemon runs it
        off its writer thread)."""
        from memoryd.governance import supersede

        if self.llm is None or not self.supersede_settings.use_llm:
            return
        limit = self.supersede_settings.max_llm_pairs
        supersede.judge_with_llm(
            job, self.llm, supersede.needs_llm(job, self.supersede_tiers, limit)
        )
        for error in job.llm_errors:  # the rules' verdicts stand; asked again next time
            logger.warning("LLM supersede judge for %s failed on %s", job.newer, error)

    def apply_supersede(self, job: supersede.SupersedeJob) -> list[SupersedeDecision]:
        """Write the job's automatic and candidate decisions into the newer memory's file (so
        `reindex` rebuilds its SUPERSEDES edges), then graph, index and a `supersede` audit
        line. Pairs decided meanwhile are left as they are."""
        self._require_writable("record supersede decisions")
        with self._file_lock(job.newer):
            edit = self._supersede_edit(job)
            if edit is None:
                return []
            old, new, details, decisions = edit
            self._replace_everywhere(old, new, event_type="supersede", details=details)
        return decisions

    def _supersede_edit(
        self, job: supersede.SupersedeJob
    ) -> tuple[Memory, Memory, dict[str, Any], list[SupersedeDecision]] | None:
        """The newer memory's file as it is and with the job's new decisions, the audit
        details and the decisions; None when nothing new was decided. The caller holds the
        file's lock."""
        from memoryd.governance import supersede

        if not supersede.new_decisions(job, self.supersede_tiers, self.clock()):
            return None  # nothing decided: its file is not read
        old = self._load(job.newer)
        edit = self._decisions_of(old, job)
        if edit is None:
            return None
        new, details, decisions = edit
        return old, new, details, decisions

    def _decisions_of(
        self, old: Memory, job: supersede.SupersedeJob
    ) -> tuple[Memory, dict[str, Any], list[SupersedeDecision]] | None:
        """`old` with the job's new decisions, the audit details and the decisions; None
        when nothing new was decided."""
        from memoryd.governance import supersede

        decided = set(old.meta.supersedes) | {d.older for d in old.meta.supersede_decisions}
        decisions = [
            d
            for d in supersede.new_decisions(job, self.supersede_tiers, self.clock())
            if d.older not in decided
        ]
        if not decisions:
            return None
        new = self._edited(old, supersede.with_decisions(old, decisions), old.path)
        details: dict[str, Any] = {
            "decisions": [
                {
                    "older": d.older,
                    "status": d.status.value,
                    "confidence": d.confidence,
                    "judge": d.judge,
                }
                for d in decisions
            ]
        }
        return new, details, decisions

    def _apply_supersedes(self, jobs: Sequence[supersede.SupersedeJob]) -> dict[str, list[str]]:
        """`apply_supersede` for a batch's jobs (distinct newer memories), `APPLY_BATCH` at a
        time in one write each (`_replace_many`): the olders each newer now replaces or is
        a candidate for. A batch that fails is logged and left to `supersede judge`."""
        out: dict[str, list[str]] = {}
        for start in range(0, len(jobs), APPLY_BATCH):
            chunk = jobs[start : start + APPLY_BATCH]
            try:
                with contextlib.ExitStack() as locks:
                    # Locks are striped (`memfile.lock_file`): each stripe is taken once, in
                    # order, or the second newer of a stripe waits for the first forever.
                    stripes = {lock_file(self.home, job.newer): job.newer for job in chunk}
                    for stripe in sorted(stripes):
                        locks.enter_context(self._file_lock(stripes[stripe]))
                    edits = [e for e in (self._supersede_edit(job) for job in chunk) if e]
                    self._replace_many(
                        [(old, new, details) for old, new, details, _ in edits],
                        event_type="supersede",
                    )
            except MemorydError as exc:
                self._judging_skipped(
                    f"supersede decisions of {len(chunk)} memories not written: {exc}"
                )
                continue
            for old, _, _, decisions in edits:
                out[old.slug] = [d.older for d in decisions if d.status is SupersedeStatus.ACTIVE]
        return out

    def _judging_skipped(self, reason: str) -> None:
        """Judging left part of a write undone (`memoryd supersede judge SLUG` runs it
        again): logged, and counted for `doctor` (`judging_skipped`), so that a vault judged
        less than it should be does not look whole."""
        logger.warning("%s", reason)
        count, _ = self.judging_skipped
        self.judging_skipped = (count + 1, f"{self.clock():%Y-%m-%d %H:%M:%S} UTC: {reason}")

    # -- explicit status lines ("Superseded by ADR-0036") ---------------------------------
    def _speakers(self, scope_hash: str, new: Sequence[Memory] = ()) -> set[str]:
        """The scope's memories whose body has a status word: one scan of the scope the first
        time, then what `new` adds."""
        from memoryd.governance import status_lines, supersede

        known = self.status_speakers.get(scope_hash)
        if known is None:
            # Plain words the engine finds cheaply, then the keywords themselves here. Not
            # through a `WITH lower(o.body) AS b`: FalkorDB's `any` over it kept no row.
            rows = self.graph.cypher(
                "MATCH (o:Memory) WHERE o.scope_hash = $scope AND o.type IN $types"
                " AND NOT o.sensitive AND o.decay_state <> 'forgotten'"
                " AND (any(w IN $words WHERE lower(o.body) CONTAINS w)"
                " OR any(c IN $folded WHERE o.body CONTAINS c)) RETURN o.slug, o.body",
                {
                    "scope": scope_hash,
                    "types": list(supersede.JUDGED_TYPES),
                    "words": list(status_lines.STATUS_WORDS),
                    "folded": list(status_lines.FOLDED),
                },
                limit=1_000_000,
                timeout_ms=SPEAKER_SCAN_TIMEOUT_MS,
            ).rows
            known = self.status_speakers[scope_hash] = {
                str(slug)
                for slug, body in rows
                if re.search(status_lines.STATUS_KEYWORDS, str(body or ""))
            }
        known |= {
            m.slug
            for m in new
            if m.meta.scope_hash == scope_hash and re.search(status_lines.STATUS_KEYWORDS, m.body)
        }
        return known

    def _status_records(
        self, scope_hash: str, new: Sequence[Memory] = ()
    ) -> tuple[list[status_lines.Record], list[status_lines.Record]]:
        """The scope's judged memories as status-line references can name them, and those of
        them whose body has a status word (the rest are read only as far as a first heading);
        nothing when the scope has no status line."""
        from memoryd.governance import status_lines, supersede

        speaking = self._speakers(scope_hash, new)
        if not speaking:
            return [], []
        # Plain queries: kuzu 0.11.3 returned some rows twice and others not at all for
        # `WITH o, regexp_matches(…) AS says RETURN … CASE WHEN says …` over the same match.
        rows = self.graph.cypher(
            "MATCH (o:Memory) WHERE o.scope_hash = $scope AND o.type IN $types"
            " AND NOT o.sensitive AND o.decay_state <> 'forgotten'"
            " RETURN o.slug, o.title, o.tags, o.source, substring(o.body, 1, 600)",
            {"scope": scope_hash, "types": list(supersede.JUDGED_TYPES)},
            limit=1_000_000,
        ).rows
        said = self.graph.cypher(
            "UNWIND $slugs AS s MATCH (o:Memory {slug: s}) RETURN o.slug, o.body",
            {"slugs": sorted(speaking)},
            limit=1_000_000,
        ).rows
        bodies = {str(slug): str(body or "") for slug, body in said}
        records: list[status_lines.Record] = []
        speakers: list[status_lines.Record] = []
        for slug, title, tags, source, head in rows:
            record = status_lines.Record(
                str(slug),
                str(title or ""),
                bodies.get(str(slug), str(head or "")),
                tuple(tags or ()),
                str(source or ""),
            )
            records.append(record)
            if record.slug in bodies:
                speakers.append(record)
        return records, speakers

    def apply_status_lines(
        self, scope_hash: str, slugs: Collection[str] | None = None, new: Sequence[Memory] = ()
    ) -> list[tuple[str, str]]:
        """Write what the scope's status lines state ("Superseded by ADR-0036", "Supersedes:
        0004", "Amended by …") between its records, for the links that touch `slugs` (None:
        all of them). A replacement is an automatic supersede quoting the line; an amendment
        a `cites` relation labelled `amends` in the amending memory's file. A pair a person
        decided is left as it is. Returns the (newer, older) supersedes written."""
        from memoryd.governance import status_lines

        if slugs is not None and not self._status_lines_may_link(scope_hash, set(slugs), new):
            return []
        records, speakers = self._status_records(scope_hash, new)
        if not speakers:
            return []
        wanted = None if slugs is None else set(slugs)
        links = [
            link
            for link in status_lines.links(records, speakers)
            if wanted is None or {link.newer, link.older, link.said_by} & wanted
        ]
        by_newer: dict[str, list[status_lines.Link]] = {}
        for link in links:
            by_newer.setdefault(link.newer, []).append(link)
        written: list[tuple[str, str]] = []
        for newer, group in by_newer.items():
            try:
                written += [(newer, older) for older in self._write_status_links(newer, group)]
            except MemorydError as exc:
                self._judging_skipped(f"status lines of {newer} not recorded: {exc}")
        return written

    def _status_lines_may_link(
        self, scope_hash: str, wanted: set[str], new: Sequence[Memory]
    ) -> bool:
        """Whether a status line of the scope can link one of `wanted` (new memories, all in
        `new`): one of them has a status line naming a record, or an older record's status
        line names a number or title key one of them goes by (`status_lines.resolve` finds a
        record by nothing else). False spares a write that no status line touches reading
        every judged memory of its scope (`_status_records`)."""
        from memoryd.governance import status_lines

        speaking = self._speakers(scope_hash, new)
        if not speaking:
            return False
        by_slug = {m.slug: m for m in new}
        if not wanted <= by_slug.keys():
            return True
        # A status word is not a status line ("Redis is replaced by Valkey in search" names
        # no record): a new memory links others only through a line that names one.
        if any(_status_lines_of(by_slug[slug].body) for slug in speaking & wanted):
            return True
        numbers: set[int] = set()
        keys: set[str] = set()
        for m in new:
            if m.slug in wanted and m.meta.scope_hash == scope_hash:
                record = status_lines.Record(
                    m.slug, m.meta.title, m.body, tuple(m.meta.tags), m.meta.source
                )
                found, named = status_lines.record_names(record)
                numbers |= found
                keys |= named
        if not numbers and not keys:
            return False
        # Only the speakers whose kept references name one of them are read again (their
        # bodies as stored now: one deleted since names nothing).
        naming = sorted(
            slug
            for slug, refs in self._speaker_refs(scope_hash, speaking, by_slug).items()
            if any(_names(ref, numbers, keys) for ref in refs)
        )
        if not naming:
            return False
        bodies = self.graph.cypher(
            "UNWIND $slugs AS s MATCH (o:Memory {slug: s}) RETURN o.body",
            {"slugs": naming},
            limit=1_000_000,
        ).rows
        return any(
            _names(ref, numbers, keys)
            for (body,) in bodies
            for line in _status_lines_of(str(body or ""))
            for ref in line.refs
        )

    def _speaker_refs(
        self, scope_hash: str, speaking: set[str], new: dict[str, Memory]
    ) -> dict[str, tuple[status_lines.Ref, ...]]:
        """The references of each speaker's status lines: its body read once while the
        scope's speakers stand (`status_speakers`, which the writes that change bodies drop),
        a new memory's from its own body. Reading every speaker's body again on each
        `record` was a large share of it (bench/RESULTS.md, s-record2)."""
        held = self.status_refs.get(scope_hash)
        if held is None or held[0] is not speaking:
            held = self.status_refs[scope_hash] = (speaking, {})
        refs = held[1]
        for slug, memory in new.items():
            if slug in speaking:
                refs[slug] = tuple(r for line in _status_lines_of(memory.body) for r in line.refs)
        missing = sorted(speaking - refs.keys())
        if missing:
            refs.update(dict.fromkeys(missing, ()))  # none stored: it names nothing
            for slug, body in self.graph.cypher(
                "UNWIND $slugs AS s MATCH (o:Memory {slug: s}) RETURN o.slug, o.body",
                {"slugs": missing},
                limit=1_000_000,
            ).rows:
                lines = _status_lines_of(str(body or ""))
                refs[str(slug)] = tuple(r for line in lines for r in line.refs)
        return refs

    def _write_status_links(self, newer: str, links: Sequence[status_lines.Link]) -> list[str]:
        from memoryd.governance import supersede

        with self._file_lock(newer):
            old = self._load(newer)
            now = self.clock()
            current = {d.older: d for d in old.meta.supersede_decisions}
            decisions: list[SupersedeDecision] = []
            relations = list(old.meta.relations)
            cited = {(r.object, r.label) for r in relations if r.predicate is Predicate.CITES}
            added: list[str] = []
            for link in links:
                reason = f'status line of {link.said_by}: "{link.line}"'
                if link.kind == "amends":
                    if (link.older, "amends") not in cited:
                        relations.append(
                            RelationRef(
                                predicate=Predicate.CITES,
                                object=link.older,
                                label="amends",
                                confidence=supersede.STATUS,
                            )
                        )
                        cited.add((link.older, "amends"))
                        added.append(link.older)
                    continue
                d = current.get(link.older)
                by_hand = d is None and link.older in old.meta.supersedes
                if by_hand or (d is not None and d.decided_by != "auto"):
                    continue  # a person's decision stands
                if d is not None and d.judge == supersede.STATUS_JUDGE and d.status == "active":
                    continue
                decisions.append(
                    SupersedeDecision(
                        older=link.older,
                        status=SupersedeStatus.ACTIVE,
                        confidence=supersede.STATUS,
                        decided_by="auto",
                        decided_at=now,
                        judge=supersede.STATUS_JUDGE,
                        reason=reason[:2000],
                        rules=supersede.RULES_VERSION,
                    )
                )
            if not decisions and not added:
                return []
            changes = supersede.with_decisions(old, decisions)
            if added:
                changes["relations"] = relations
            new = self._edited(old, changes, old.path)
            details = {
                "decisions": [
                    {
                        "older": d.older,
                        "status": d.status.value,
                        "confidence": d.confidence,
                        "judge": d.judge,
                        "reason": d.reason,
                    }
                    for d in decisions
                ],
                "amends": added,
            }
            self._replace_everywhere(old, new, event_type="supersede", details=details)
        return [d.older for d in decisions]

    def judge_unwritten(self, memory: Memory) -> tuple[Memory, dict[str, Any]] | None:
        """Judge one new memory before its write (`record`), so that its decisions are written
        with it, not by a second write of its file, graph row and index document: the memory
        with its decisions and the details of its `supersede` audit event (None details when
        nothing was decided). None when it must be judged once written (`judge_written`):
        a status line of its scope may link it, an LLM judges, or a query failed. The same
        pairs and verdicts as `judge_written` (`find_pairs_unwritten`)."""
        from memoryd.governance import supersede
        from memoryd.governance.analyze import sensitive

        if not memory.meta.type.long_term or memory.sensitive:
            return memory, {}  # `judge_written` judges neither
        if self.llm is not None:
            return None
        scope_hash = memory.meta.scope_hash
        if sensitive(memory, self.vault.read_scope(scope_hash)):
            return memory, {}  # as `prepare_supersede`: its text is never judged
        try:
            if self._status_lines_may_link(scope_hash, {memory.slug}, [memory]):
                return None
            if not (memory.meta.observations or memory.meta.relations):
                return memory, {}
            ids = [eid for slug, eid in graph_rows([memory]).mentions if slug == memory.slug]
            self.judged_mentions.warm(self.graph, scope_hash)  # once per scope, then kept
            pairs = supersede.find_pairs_unwritten(
                self.graph,
                memory,
                ids,
                limit=self.supersede_settings.max_pairs,
                kept=self.judged_mentions,
            )
        except MemorydError as exc:
            logger.warning("supersede judging of %s before its write failed: %s", memory.slug, exc)
            return None
        if not pairs:
            return memory, {}
        text = supersede.pair_texts(memory.meta.title, memory.body)
        job = supersede.SupersedeJob(
            memory.slug, text, pairs, session=memory.meta.type.value == "session"
        )
        supersede.judge_pairs(job)
        edit = self._decisions_of(memory, job)
        if edit is None:
            return memory, {}
        new, details, _ = edit
        clean_stored(new)  # as `_replace_everywhere` cleans a rewrite: reasons quote text
        return new, details

    def judge_written(self, memories: Sequence[Memory], *, use_llm: bool) -> list[tuple[str, str]]:
        """Judge newly written long-term memories the same way, one write or an import: the
        status lines of their scopes first (a record that names the one it replaces, or the
        one that replaces it, recorded before or after it), then the rules for each memory
        in `created_at` order. A failure is logged: the memories are written, and `memoryd
        supersede judge SLUG` runs it again. Returns the (newer, older) supersedes written."""
        from memoryd.governance import supersede

        judged = sorted(
            (
                m
                for m in memories
                if m.meta.type.long_term and not m.sensitive  # no entities of it in the graph
            ),
            key=lambda m: (m.meta.created_at, m.slug),
        )
        if len(judged) > SUPERSEDE_BULK_LIMIT:
            logger.info(
                "%d memories imported: too many to judge supersedes now; run"
                " `memoryd supersede judge SLUG` for those that matter",
                len(judged),
            )
            return []
        written: list[tuple[str, str]] = []
        slugs = {m.slug for m in judged}
        for scope_hash in dict.fromkeys(m.meta.scope_hash for m in judged):
            try:
                written += self.apply_status_lines(scope_hash, slugs, judged)
            except MemorydError as exc:
                self._judging_skipped(f"status lines of scope {scope_hash} not read: {exc}")
        inline = use_llm and self.llm_judge_inline
        linked = [m for m in judged if m.meta.observations or m.meta.relations]
        try:
            found = supersede.find_pairs_many(
                self.graph, linked, limit=self.supersede_settings.max_pairs
            )
        except MemorydError as exc:
            self._judging_skipped(f"supersede pairs of {len(linked)} memories not found: {exc}")
            return written
        jobs = self._batch_jobs(linked, found, inline=inline, queue=use_llm and not inline)
        # Every decision of the batch in one write (a graph transaction and an index commit
        # per newer memory cost more than judging it).
        for newer, olders in self._apply_supersedes(jobs).items():
            written += [(newer, older) for older in olders]
        return written

    # -- repair: automatic decisions an older version of the rules made -----------------
    def repair_supersedes(self) -> int:
        """Judge again, with the current rules, every automatic decision an older version of
        the rules made (on open; one query when nothing is owed). Each is kept, changed
        (automatic ↔ candidate) or removed, with a `supersede` audit event per rewritten
        memory listing what happened to each pair; the status lines of the scopes touched
        are read afterwards. A person's decision and the LLM's are never touched. Returns how
        many decisions changed or were removed."""
        from memoryd.governance.supersede_version import RULES_VERSION

        self._require_writable("repair supersede decisions")
        owed = self.graph.cypher(
            "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) WHERE r.decided_by = 'auto'"
            " AND r.judge STARTS WITH 'rule:' AND (r.rules IS NULL OR r.rules < $version)"
            " RETURN DISTINCT n.slug, n.scope_hash",
            {"version": RULES_VERSION},
            limit=1_000_000,
        ).rows
        if not owed:
            return 0
        changed = 0
        scopes: dict[str, None] = {}
        for slug, scope_hash in owed:
            scopes[str(scope_hash)] = None
            try:
                changed += self._rejudge(str(slug))
            except MemorydError as exc:
                logger.warning("supersede decisions of %s not judged again: %s", slug, exc)
        for scope_hash in scopes:
            try:
                self.apply_status_lines(scope_hash)
            except MemorydError as exc:
                self._judging_skipped(f"status lines of scope {scope_hash} not read: {exc}")
        logger.info(
            "judged again %d memories' automatic supersedes made by older rules: %d changed",
            len(owed),
            changed,
        )
        return changed

    def _rejudge(self, slug: str) -> int:
        from memoryd.governance import supersede

        tiers = self.supersede_tiers
        with self._file_lock(slug):
            old = self._load(slug)
            owed = [
                d
                for d in old.meta.supersede_decisions
                if d.decided_by == "auto"
                and (d.judge or "").startswith("rule:")
                and (d.rules is None or d.rules < supersede.RULES_VERSION)
            ]
            if not owed:
                return 0
            newer_text = supersede.pair_texts(old.meta.title, old.body)
            verdicts: dict[str, supersede.Verdict] = {}
            for d in owed:
                pair = supersede.pair_of(self.graph, slug, d.older)
                if pair is None:
                    continue  # the older memory is gone or forgotten: nothing to replace
                verdict = supersede.judge_by_rules(newer_text, pair.older_text, pair.known)
                if verdict is not None:
                    verdicts[d.older] = verdict
            current = sum(
                1
                for d in old.meta.supersede_decisions
                if d.status is SupersedeStatus.ACTIVE
                and d.rules == supersede.RULES_VERSION
                and d.judge != supersede.STATUS_JUDGE
            )
            supersede.limit_fan_out(verdicts, tiers, already=current)
            now = self.clock()
            outcome: dict[str, SupersedeDecision | None] = {}
            report: list[dict[str, object]] = []
            for d in owed:
                verdict = verdicts.get(d.older)
                status = None if verdict is None else tiers.status(verdict.confidence)
                if verdict is None or status is None:
                    outcome[d.older] = None
                    report.append({"older": d.older, "was": d.status.value, "now": "removed"})
                    continue
                outcome[d.older] = d.model_copy(
                    update={
                        "status": status,
                        "confidence": verdict.confidence,
                        "judge": verdict.judge,
                        "reason": verdict.reason,
                        "rules": supersede.RULES_VERSION,
                        "decided_at": now,
                    }
                )
                report.append(
                    {
                        "older": d.older,
                        "was": d.status.value,
                        "now": "kept" if status is d.status else status.value,
                        "judge": verdict.judge,
                        "reason": verdict.reason,
                    }
                )
            kept = [
                d
                for d in (outcome.get(d.older, d) for d in old.meta.supersede_decisions)
                if d is not None
            ]
            active = [d.older for d in kept if d.status is SupersedeStatus.ACTIVE]
            supersedes = [s for s in old.meta.supersedes if s not in outcome or s in active]
            supersedes += [s for s in active if s in outcome and s not in supersedes]
            new = self._edited(
                old, {"supersede_decisions": kept, "supersedes": supersedes}, old.path
            )
            details = {"rules": supersede.RULES_VERSION, "rejudged": report}
            self._replace_everywhere(old, new, event_type="supersede", details=details)
        return sum(1 for r in report if r["now"] != "kept")

    def automatic_supersedes(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        """The automatic supersede decisions (active and candidates), with the rule or model
        that made them, its version and its evidence: `memoryd supersede list --auto`."""
        from memoryd.governance import supersede

        return supersede.automatic(self.graph, self.scope_hash_of(scope))

    def judge_supersedes(self, slug: str, *, use_llm: bool = True) -> list[SupersedeDecision]:
        """Judge whether this memory replaces older ones, and record what was decided."""
        return self._judge_supersedes(slug, use_llm=use_llm, pairs=None)

    def _judge_supersedes(
        self, slug: str, *, use_llm: bool, pairs: list[supersede.Pair] | None
    ) -> list[SupersedeDecision]:
        """`judge_supersedes` on candidate `pairs` a bulk write found for its whole batch
        (None: this memory's own query)."""
        self._require_writable("judge supersedes")
        job = self.prepare_supersede(slug, pairs)
        if job is None:
            return []
        if use_llm:
            self.judge_supersedes_llm(job)
        return self.apply_supersede(job)

    # -- the judge queue (the daemon's worker: the LLM's part, durable, with backoff) ------
    def judges_due(self, limit: int) -> list[JudgeRow]:
        """The memories whose LLM judging is owed and due now (a read); none while no LLM
        judge is configured (they wait for one)."""
        if self.llm is None or not self.supersede_settings.use_llm:
            return []
        return self.governance.due_judges(self.clock(), limit)

    def settle_judge(self, row: JudgeRow, errors: list[str]) -> str:
        """Record how a queued judge job ended (a write): `done`, or, after `errors` (the LLM
        failed on a pair, or the memory could not be read), `retry` after the enrichment
        queue's backoff and `failed` after its last attempt. A memory queued again meanwhile
        keeps its new queueing."""
        self._require_writable("settle supersede judging")
        now = self.clock()
        state: EnrichmentState = "done"
        attempts, wait, error = row.attempts, 0.0, None
        if errors:
            attempts += 1
            state = "failed" if attempts >= self.enrichment.max_attempts else "pending"
            wait = self.enrichment.backoff(attempts)
            error = "; ".join(errors)[:2000]
            logger.warning(
                "LLM supersede judge of %s failed (attempt %d of %d)%s",
                row.slug,
                attempts,
                self.enrichment.max_attempts,
                "" if state == "failed" else f"; retried in {wait:.0f} s",
            )
        self.governance.settle_judge(
            row,
            state=state,
            attempts=attempts,
            last_error=error,
            next_attempt_at=now + timedelta(seconds=wait),
            now=now,
        )
        return "retry" if state == "pending" else state

    def judge_counts(self) -> dict[EnrichmentState, int]:
        """Queued judge jobs by state: pending, done, failed (for `doctor`)."""
        return self.governance.judge_counts()

    def decide_supersede(
        self,
        newer: str,
        older: str,
        action: supersede.SupersedeAction,
        *,
        by: str = "user",
        agent: bool = False,
    ) -> SupersedeDecision:
        """`undo` an active supersede, or `accept`/`reject` a candidate; audited. An `agent`
        (MCP) decides only when `governance.agents_decide` lets agents decide, as for
        promotions: which memory is current is the user's call."""
        from memoryd.governance import supersede

        self._require_writable(f"{action} a supersede")
        if agent and not self.review.policy.agents_decide:
            raise PolicyDenied(
                f"agents may not decide supersedes here ({newer} → {older} stays as it is)",
                hint="set `agents_decide = true` under [governance] in config.toml to let"
                f" agents decide, or decide yourself: `memoryd supersede {action} {newer} {older}`",
            )
        if by not in ("user", "digest"):
            raise InvalidInput(f"decided_by {by!r} must be user or digest")
        if self.graph.get_memory(older) is None and self.vault.find(older) is None:
            raise NotFound(f"no memory with slug {older!r}", hint="`memoryd list` shows the slugs")
        with self._file_lock(newer):
            old = self._load(newer)
            decision = supersede.decide(old, older, action, by=by, now=self.clock())
            new = self._edited(old, supersede.with_decisions(old, [decision]), old.path)
            self._replace_everywhere(
                old,
                new,
                event_type=f"supersede_{action}",
                details={"older": older, "status": decision.status.value, "decided_by": by},
            )
        return decision

    def supersede_candidates(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        """Supersede candidates waiting for a human, most confident first."""
        from memoryd.governance import supersede

        return supersede.candidates(self.graph, self.scope_hash_of(scope))
