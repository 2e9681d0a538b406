"""The ``webhook`` endpoint: an HTTP receiver, push-only.

* :mod:`.config` — :class:`WebhookConfig`, URLs without secrets
* :mod:`.chunks` — :func:`plan_chunks`: deterministic chunks and ``Idempotency-Key``
* :mod:`.client` — :class:`WebhookClient`: POST with retries under the policy
* :mod:`.driver` — :class:`WebhookDriver`

Needs ``pip install 'tidemark[webhook]'`` (urllib3).
"""

from tidemark.drivers.webhook.driver import WebhookDriver

__all__ = ["WebhookDriver"]
