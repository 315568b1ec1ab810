"""The lean request path of the cloud backends: HTTP/1.1 on asyncio, nothing per request that
the committer does not need.

- ``connection.py``: persistent connections to one origin and the request/answer cycle;
- ``loop.py``: the process's request loop (uvloop when installed);
- ``limiter.py``: how many requests a store keeps in flight (adaptive, follows throttling);
- ``azure_auth.py``: Shared Key signing, SAS, bearer tokens for Azure;
- ``gcs_auth.py``: the bearer token of Google Cloud Storage;
- ``multipart.py``: batch requests (Blob Batch, the GCS batch endpoint).
"""
