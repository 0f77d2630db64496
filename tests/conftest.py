"""Shared test setup.

With pytest's default ``prepend`` import mode this file puts ``tests/`` on
``sys.path``, so test modules can ``import storage_helpers``.
"""
