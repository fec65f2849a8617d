"""Generation backends shared by ``curate rl-filter`` and ``curate recaption``.

Three implementations of :class:`GenerationBackend`:

* ``transformers`` (``--model ckpt/``): a local checkpoint, batched sampling;
* ``openai`` (``--endpoint URL --served-model NAME``): any OpenAI-compatible
  server (vLLM, SGLang, ``transformers serve``), concurrent, with retries;
* ``rollouts`` (``--rollouts FILE``): answers generated elsewhere.

:func:`make_backend` builds one from the CLI flags; the requests, results and sampling
parameters they share are in :mod:`curate.generate.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curate.generate.checks import backend_kind

if TYPE_CHECKING:
    from curate.generate.base import GenerationBackend


def make_backend(model: str | None = None, endpoint: str | None = None, served_model: str | None = None,
                 rollouts: str | None = None, **options: Any) -> GenerationBackend:
    """Build the backend named by exactly one of ``model``, ``endpoint`` or ``rollouts``.

    Options that are None are ignored (so CLI flags can be passed through as they
    are); an option that the chosen backend does not take is a :class:`UserError`.

    Args:
        model: Local checkpoint folder → :class:`TransformersBackend`.
        endpoint: OpenAI-compatible base URL → :class:`OpenAIBackend`.
        served_model: The ``model`` name to request from ``endpoint``.
        rollouts: JSONL or Parquet file of stored answers → :class:`RolloutsBackend`.
        **options: Backend options: transformers: ``device``, ``dtype``, ``batch_size``,
            ``trust_remote_code``, ``chat_template_kwargs``, ``max_image_pixels``, ``max_image_bytes``;
            openai: ``api_key``, ``concurrency``, ``timeout``, ``max_retries``, ``backoff``,
            ``backoff_max``, ``n_per_call``, ``send_seed``, ``extra_body``,
            ``max_image_pixels``, ``max_image_bytes``, ``max_consecutive_failures``; rollouts: ``rollouts_version``.

    Returns:
        The backend (close it, or use it as a context manager).

    Raises:
        UserError: none or several of model/endpoint/rollouts, or a misplaced option.
    """
    kind = backend_kind(model, endpoint, served_model, rollouts, **options)
    options = {k: v for k, v in options.items() if v is not None}
    if kind == "transformers":
        from curate.generate.transformers_backend import TransformersBackend

        return TransformersBackend(model, **options)  # type: ignore[arg-type]
    if kind == "openai":
        from curate.generate.openai_backend import OpenAIBackend

        return OpenAIBackend(endpoint, served_model=served_model, **options)  # type: ignore[arg-type]
    from curate.generate.rollouts_backend import RolloutsBackend

    return RolloutsBackend(rollouts, version=options.get("rollouts_version"))  # type: ignore[arg-type]
