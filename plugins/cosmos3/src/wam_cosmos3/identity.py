"""Which model an SGLang server serves, and whether it is the one the user configured.

Endpoints (SGLang 0.5.18-0.5.23; sgl-project/sglang
``python/sglang/multimodal_gen/runtime/entrypoints/openai/common_api.py`` and
``.../entrypoints/action/cosmos3.py`` ``cosmos3_action_metadata``):
``GET /v1/models`` lists one card whose ``id`` is the served model name (``--model-id``,
else ``--model-path``) and ``root`` the model path; ``GET /v1/actions/metadata`` answers
only where the action router is mounted and names ``policy_family`` ("cosmos3") and
``model_path``: the best single check that the server is a Cosmos3 action server.
"""

from __future__ import annotations

from typing import Optional

import attrs

from wamcore.errors import CheckpointError, ProtocolError

from .transport import SGLangClient

POLICY_FAMILY = "cosmos3"


@attrs.frozen
class ServedModel:
    """What the server says it serves."""

    id: str
    model_path: Optional[str] = None
    pipeline_class: Optional[str] = None
    policy_family: Optional[str] = None
    max_batch_size: Optional[int] = None
    action_horizon: Optional[int] = None

    @property
    def names(self) -> tuple:
        """The strings a user may configure to mean this model."""
        return tuple(n for n in (self.id, self.model_path) if n)

    def details(self) -> dict:
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def identify(client: SGLangClient, *, timeout_s: Optional[float] = None, retries: Optional[int] = None) -> ServedModel:
    """Ask the server which model it serves; a server that is not a Cosmos3 action server
    is a :class:`ProtocolError` saying what it is instead."""
    listing = client.get_json("/v1/models", timeout_s=timeout_s, retries=retries)
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not cards or not isinstance(cards[0], dict) or not cards[0].get("id"):
        raise ProtocolError(f"SGLang at {client.url} lists no served model in GET /v1/models: {listing!r:.300}")
    card = cards[0]
    try:
        meta = client.get_json("/v1/actions/metadata", timeout_s=timeout_s, retries=retries)
    except ProtocolError as exc:
        if getattr(exc, "status", None) != 404:
            raise
        raise ProtocolError(
            f"SGLang at {client.url} serves {card['id']!r} but has no action endpoint (GET /v1/actions/metadata "
            "is 404): Cosmos3 actions need sglang >= 0.5.18 serving a Cosmos3 pipeline"
        ) from None
    family = meta.get("policy_family") if isinstance(meta, dict) else None
    if family != POLICY_FAMILY:
        raise ProtocolError(
            f"SGLang at {client.url} serves {card['id']!r} with action policy family {family!r}, not {POLICY_FAMILY!r}"
        )
    output = meta.get("output") or {}
    capabilities = meta.get("capabilities") or {}
    return ServedModel(
        id=str(card["id"]),
        model_path=meta.get("model_path") or card.get("root"),
        pipeline_class=card.get("pipeline_class"),
        policy_family=family,
        max_batch_size=capabilities.get("max_batch_size"),
        action_horizon=output.get("action_horizon"),
    )


def check_expected(served: ServedModel, expected: Optional[str], url: str) -> None:
    """``expected`` (``--am-checkpoint``) must name the served model: its id or its path."""
    if expected and not any(_same(expected, name) for name in served.names):
        raise CheckpointError(
            f"SGLang at {url} serves {served.id!r} (model path {served.model_path!r}), "
            f"not the configured {expected!r}. Start SGLang with that model, or pass the served one "
            "as --am-checkpoint (or leave --am-checkpoint out to accept whatever SGLang serves)."
        )


__all__ = ["ServedModel", "identify", "check_expected", "POLICY_FAMILY"]
