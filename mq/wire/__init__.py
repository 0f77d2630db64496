"""Sans-IO codecs of mq's native protocol (frames, requests, responses).

Pure functions over bytes: nothing here opens a socket or runs an event loop.
"""
