"""The leased object stores the tests run on — S3 (a moto server) and Azure Blob (Azurite)
— behind one face, so a lease, failover, torture or chaos test is written once for both.

A store gives: `new_root()` (a fresh bucket/container + `/wf`), `filesystem()` (a new
client, as another host has), `url(root)` and `env()` (how a child process reaches it by
URL alone, as `little worker --world URL` does), `network_path()` (a host whose network
can be cut), `lock_version()` (the store's ETag of a lock object) and `module` (the
adapter module whose `LEASE_SECONDS` a test may lower)."""

from __future__ import annotations

from typing import Any


class S3Store:
    kind = "s3"

    def __init__(self, request: Any) -> None:
        import fs_adapters.object_store as module

        self.module = module
        self.server = request.getfixturevalue("moto_s3")
        self.storage_options: dict[str, Any] = self.server.storage_options

    def new_root(self) -> str:
        return f"{self.server.new_bucket()}/wf"

    def filesystem(self) -> Any:
        return self.server.filesystem()

    def url(self, root: str) -> str:
        return f"s3://{root}"

    def env(self) -> dict[str, str]:
        return {"FSSPEC_S3_ENDPOINT_URL": self.server.endpoint,
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1"}

    def network_path(self) -> Any:
        from s3_server import NetworkPath

        return NetworkPath(self.server)

    def lock_version(self, fs: Any, path: str) -> str:
        bucket, _, key = path.partition("/")
        return str(fs.call_s3("head_object", Bucket=bucket, Key=key)["ETag"])

    def drop_container(self, root: str) -> None:
        fs = self.filesystem()
        bucket = root.partition("/")[0]
        fs.rm(bucket, recursive=True)  # its objects, then the bucket itself
        assert not fs.exists(bucket)


class AzureStore:
    kind = "azure"

    def __init__(self, request: Any) -> None:
        import fs_adapters.azure_blob as module

        self.module = module
        self.server = request.getfixturevalue("azurite")
        self.storage_options: dict[str, Any] = self.server.storage_options

    def new_root(self) -> str:
        return f"{self.server.new_container()}/wf"

    def filesystem(self) -> Any:
        return self.server.filesystem()

    def url(self, root: str) -> str:
        return f"az://{root}"

    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.server.connection_string}

    def network_path(self) -> Any:
        from azurite_server import NetworkPath

        return NetworkPath(self.server)

    def lock_version(self, fs: Any, path: str) -> str:
        return str(fs.info(path, refresh=True)["etag"])

    def drop_container(self, root: str) -> None:
        self.filesystem().rmdir(root.partition("/")[0])


def leased_store(kind: str, request: Any) -> Any:
    """The store `kind` ("s3" or "azure") on its session server (through pytest's
    `request`, which starts the server fixture on first use)."""
    if kind == "s3":
        return S3Store(request)
    if kind == "azure":
        return AzureStore(request)
    raise ValueError(kind)
