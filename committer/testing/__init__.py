"""Helpers for tests and benchmarks that need real (emulated) cloud stores.

- ``emulators``: Azurite and fake-gcs-server as child processes on 127.0.0.1;
- ``adls_stub``: an in-memory Azure account with Blob and Data Lake (DFS) endpoints, with or
  without a hierarchical namespace (Azurite has no DFS endpoint);
- ``gcs_move_proxy``: the GCS objects move API in front of fake-gcs-server (which refuses it);
- ``http_stub``: what the two stubs share (a threaded aiohttp server, request log, faults).
"""
