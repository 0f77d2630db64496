"""Authorization: ACL bindings (:mod:`mq.acl.model`) and their index (:mod:`mq.acl.index`).

Pure modules, no I/O: the broker keeps the bindings in its metadata store and
asks the index from its request gate (:mod:`mq.broker.authorizer`).
"""
