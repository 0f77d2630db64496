"""mq: a durable, replicated message queue and log broker for Python.

The public client API is exported here as it lands; the storage engine lives in
:mod:`mq.storage`.
"""

__version__ = "0.1.0.dev0"

from mq.errors import MQError

__all__ = ["MQError", "__version__"]
