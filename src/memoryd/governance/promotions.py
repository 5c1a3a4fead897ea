"""The promotions queue under review: propose, list, promote, reject.

A session memory whose DURA mean reaches `governance.dura_threshold` is proposed for
promotion (`analyze`). A person — or an agent, when `governance.agents_decide` lets it —
decides: `promote` writes the long-term memory
`scopes/<hash>/<type>s/promoted-<id>-<stem>.md` with `promoted_from` (indexed with a
PROMOTED_FROM edge) and records the decision; `reject` records the refusal. Every decision is
an audit event; deciding twice is a Conflict, an unknown id NotFound.

`Review` gets its collaborators as callables, so it holds no store but the queue's: the
service wires it to the vault, graph and audit log.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from memoryd.audit import AuditEvent
from memoryd.errors import Conflict, InvalidInput, NotFound, PolicyDenied
from memoryd.governance.store import GovernanceStore, Proposed
from memoryd.models import (
    CJK,
    Memory,
    MemoryDraft,
    MemoryType,
    Promotion,
    PromotionProposal,
    PromotionStatus,
    utcnow,
)
from memoryd.redact import redact

logger = logging.getLogger(__name__)

AGENTS_MAY_NOT_DECIDE = (
    "set `agents_decide = true` under [governance] in config.toml to let agents decide, or"
    " decide yourself: `memoryd promote ID` / `memoryd reject ID`"
)
_STEM_WORDS = re.compile(rf"[a-z0-9]+|[{CJK}]+")


DEFAULT_THRESHOLD = 0.6
"""The DURA mean at which a scored session is queued for promotion (`analyze.promotes`)."""


@dataclass(frozen=True)
class ReviewPolicy:
    """`governance.dura_threshold` and `governance.agents_decide` from the settings."""

    dura_threshold: float = DEFAULT_THRESHOLD
    agents_decide: bool = False


def promoted_slug(promotion_id: int, title: str) -> str:
    """`promoted-<id>-<stem>`: the id makes it unique, so a promote cut short by a crash
    finds the memory it already wrote instead of writing a second one."""
    kept = "".join(
        char
        if re.match(f"[{CJK}]", char)
        else unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode() or " "
        for char in unicodedata.normalize("NFKC", title).lower()
    )
    stem = "-".join(_STEM_WORDS.findall(kept))[:48].strip("-") or "memory"
    return f"promoted-{promotion_id}-{stem}"


WriteMemory = Callable[[MemoryDraft, str], Memory]
"""Record a draft in the scope with this hash (vault, graph, index, audit)."""


class Review:
    """Decisions on the promotions queue."""

    def __init__(
        self,
        store: GovernanceStore,
        policy: ReviewPolicy,
        *,
        write: WriteMemory,
        exists: Callable[[str], bool],
        audit: Callable[[AuditEvent], object],
    ) -> None:
        self.store = store
        self.policy = policy
        self._write = write
        self._exists = exists
        self._audit = audit

    # -- the queue ------------------------------------------------------------------------
    def propose(self, proposal: PromotionProposal) -> tuple[int, Proposed] | None:
        """Queue `proposal` when its mean reaches the threshold; None when it does not."""
        from memoryd.governance.analyze import promotes

        if not promotes(proposal, self.policy.dura_threshold):
            return None
        return self.store.propose_promotion(proposal, utcnow())

    def list(
        self,
        *,
        status: PromotionStatus | None = "pending",
        scope_hash: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        if not 1 <= limit <= 10_000:
            raise InvalidInput(f"limit {limit} must be between 1 and 10000")
        return self.store.promotions(
            status=status, scope_hash=scope_hash, limit=limit, offset=max(0, offset)
        )

    def get(self, promotion_id: int) -> Promotion:
        # SQLite integers are 64-bit: a larger id cannot be in the table (nor be bound).
        found = self.store.promotion(promotion_id) if 0 < promotion_id < 2**63 else None
        if found is None:
            raise NotFound(
                f"no promotion {promotion_id}",
                hint="`memoryd promotions --status pending` lists the queue with its ids",
            )
        return found

    # -- decisions ------------------------------------------------------------------------
    def _decidable(self, promotion_id: int, *, actor: str, agent: bool) -> Promotion:
        promotion = self.get(promotion_id)
        if agent and not self.policy.agents_decide:
            raise PolicyDenied(
                f"agents may not decide promotions here (promotion {promotion_id} stays"
                f" {promotion.status})",
                hint=AGENTS_MAY_NOT_DECIDE,
            )
        if promotion.status != "pending":
            raise Conflict(
                f"promotion {promotion_id} was already decided: {promotion.status}"
                f" by {promotion.decided_by or '?'} at {promotion.decided_at}",
                hint="`memoryd promotions --status pending` lists what is left to decide",
            )
        return promotion

    def promote(
        self,
        promotion_id: int,
        *,
        actor: str,
        agent: bool = False,
        type: MemoryType | None = None,
        title: str | None = None,
        body: str | None = None,
    ) -> Promotion:
        """Write the long-term memory the promotion proposes (as edited), then record the
        approval and a `promote` audit event. A deleted source session is an error and the
        promotion stays pending, marked `source_missing_at`."""
        promotion = self._decidable(promotion_id, actor=actor, agent=agent)
        kind = type or promotion.proposed_type
        if not kind.long_term:
            raise InvalidInput(
                "a promotion becomes a long-term memory, not a session",
                hint="--type decision|preference|fact|playbook|warning",
            )
        # Redacted before the slug is made from the title (`redact.fields`).
        final_title = redact(title if title is not None else promotion.proposed_title).strip()
        final_body = redact(body if body is not None else promotion.proposed_body).strip()
        if not final_title or not final_body:
            raise InvalidInput(
                f"the promoted memory needs a {'title' if not final_title else 'body'}",
                hint="pass --title TEXT or --body-file FILE with some text in it",
            )
        slug = promoted_slug(promotion_id, final_title)
        if not self._exists(promotion.source_slug):
            self.store.mark_source_missing(promotion_id, utcnow())
            raise NotFound(
                f"promotion {promotion_id}'s source session {promotion.source_slug} was deleted;"
                " nothing was written and the promotion stays pending, marked source-missing",
                hint=f"restore the session (`memoryd restore {promotion.source_slug}`) and"
                f" promote again, or `memoryd reject {promotion_id}`",
            )
        supersedes = [s for s in promotion.proposed_supersedes if self._exists(s)]
        dropped = sorted(set(promotion.proposed_supersedes) - set(supersedes))
        if dropped:
            logger.warning("promotion %d: %s gone, not superseded", promotion_id, dropped)
        edited = (
            kind is not promotion.proposed_type
            or final_title != promotion.proposed_title
            or final_body != promotion.proposed_body.strip()
        )
        if self._exists(slug):
            # A promote cut short after writing: the memory is there, record the decision.
            logger.info("promotion %d: %s was already written", promotion_id, slug)
        else:
            draft = MemoryDraft(
                type=kind,
                title=final_title,
                body=final_body,
                source=f"promotion:{promotion_id}",
                triggers=promotion.proposed_triggers,
                supersedes=supersedes,
                promoted_from=promotion.source_slug,
                slug=slug,
            )
            self._write(draft, promotion.scope_hash)
        decided = self.store.decide_promotion(
            promotion_id, "approved", by=actor, now=utcnow(), promoted_slug=slug
        )
        self._audit(
            AuditEvent(
                actor=actor,
                event_type="promote",
                scope_hash=promotion.scope_hash,
                target_id=slug,
                details={
                    "promotion": promotion_id,
                    "from": promotion.source_slug,
                    "type": kind.value,
                    "edited": edited,
                    "dura_by": promotion.dura.by,
                },
            )
        )
        return decided

    def reject(
        self, promotion_id: int, *, actor: str, agent: bool = False, reason: str | None = None
    ) -> Promotion:
        """Record the refusal (the reason stays in governance.db, not in the audit log)."""
        promotion = self._decidable(promotion_id, actor=actor, agent=agent)
        reason = (reason or "").strip() or None
        decided = self.store.decide_promotion(
            promotion_id, "rejected", by=actor, now=utcnow(), reason=reason
        )
        self._audit(
            AuditEvent(
                actor=actor,
                event_type="reject",
                scope_hash=promotion.scope_hash,
                target_id=promotion.source_slug,
                details={"promotion": promotion_id, "reason_given": reason is not None},
            )
        )
        return decided
