"""Azure Storage (``abfs://``, ``abfss://``, ``az://``), by concern:

- ``store.py``: :class:`AzureStore` (reading, writing, deleting, which rename each account
  gets) and ``open_azure``, registered for the schemes;
- ``account.py``: the account's endpoints, credential, requests, the namespace question;
- ``datalake.py``: the atomic Data Lake rename of a hierarchical-namespace account;
- ``blob.py``: flat Blob storage's copy + delete rename, the completion of a half-done one,
  and Blob Batch deletes;
- ``wire.py``: the REST API version, endpoints, error answers, listings, Blob Batch bodies;
- ``auth.py``: Shared Key signing, SAS, bearer tokens.
- ``tokens.py``: the Entra ID tokens of ABFS's OAuth providers (client credentials, managed
  and workload identity, refresh token), fetched on the project's HTTP client.
"""

from committer.store.azure.blob import BATCH_LIMIT
from committer.store.azure.store import AzureStore, open_azure
from committer.store.azure.wire import API_VERSION, azure_error

__all__ = ["API_VERSION", "BATCH_LIMIT", "AzureStore", "azure_error", "open_azure"]
