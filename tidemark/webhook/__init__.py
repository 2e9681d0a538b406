"""An HTTP webhook as a tidemark endpoint, as a library (push-only; the driver builds on it).

* :mod:`~tidemark.webhook.config` — :class:`WebhookConfig`, URLs without secrets
* :mod:`~tidemark.webhook.chunks` — :func:`plan_chunks`: deterministic chunks and ``Idempotency-Key``
* :mod:`~tidemark.webhook.client` — :class:`WebhookClient`: POST with retries under the policy

Needs ``pip install 'tidemark[webhook]'`` (urllib3).
"""

from tidemark.webhook.chunks import Chunk, idempotency_key, plan_chunks
from tidemark.webhook.client import Delivered, WebhookClient, retry_after_seconds
from tidemark.webhook.config import WebhookConfig, display_url

__all__ = ["Chunk", "Delivered", "WebhookClient", "WebhookConfig", "display_url", "idempotency_key",
           "plan_chunks", "retry_after_seconds"]
