"""The lean request path of the cloud backends: HTTP/1.1 on asyncio, nothing per request that
the committer does not need. Shared by every cloud backend; what is one service's (its
signing, its answers) lives in that backend's package (``azure/``, ``gcs/``).

- ``connection.py``: persistent connections to one origin and the request/answer cycle;
- ``messages.py``: the values of that cycle (origin, answer, header lookup);
- ``loop.py``: the process's request loop (uvloop when installed);
- ``limiter.py``: how many requests a store keeps in flight (adaptive, follows throttling);
- ``hedge.py``: a copy of a slow read raced against it, on a budget;
- ``strain.py``: whether the service is strained as a whole (refusing, or slowed under load);
- ``multipart.py``: batch requests (Blob Batch, the GCS batch endpoint);
- ``quoting.py``: percent-encoding.
"""
