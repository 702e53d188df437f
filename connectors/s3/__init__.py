"""The local S3-API store (``connectors.s3.local_store``) for development and tests."""

__all__: list[str] = []
