"""One storage layer: every location is a URI string, opened through pyarrow.fs.

A location is a local path (relative paths resolve against the working directory), `file://…`,
`s3://bucket/key`, `gs://bucket/key`, `hdfs://namenode/path`, or `abfs(s)://container@account…`.
Every read and write of the pipeline goes through the functions here, so a run_dir on S3 works the
same as one on local disk, on the driver and on the executors alike.

Credentials and endpoints come from each store's standard chain, with no config needed: for S3 the
AWS SDK's (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws,
the instance role), plus AWS_ENDPOINT_URL(_S3) and AWS_REGION / AWS_DEFAULT_REGION, which pyarrow 14
does not read by itself. The config's `storage` section may add non-secret options; secrets never
pass through here into a config, manifest, marker or log.

Object stores cannot rename, so nothing here renames except on local disk (an optimisation that
keeps a half-written local file from ever being seen): whatever others read is committed by a file
written last, in a single write (an object PUT is atomic).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import hashlib
import io
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from pipeline.errors import ShardlineError

REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "az")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_GLOB_CHARS = re.compile(r"[*?\[]")


class StorageError(ShardlineError, OSError):
    """A store could not be reached or used: names the store, the location and what to check."""


@dataclass(frozen=True)
class StorageOptions:
    """What the config's `storage` section can set (none of it secret). Shipped to Spark tasks."""

    s3_endpoint: str | None = None  # e.g. http://127.0.0.1:9000 (MinIO); else AWS_ENDPOINT_URL(_S3)
    s3_region: str | None = None  # else AWS_REGION / AWS_DEFAULT_REGION
    s3_anonymous: bool = False  # public buckets: send no credentials
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 60.0
    max_attempts: int = 3  # per request, so a wrong endpoint or bucket fails in seconds, not minutes


_options = StorageOptions()


def configure(options: StorageOptions) -> None:
    """Set the process's storage options (each entry point calls it once, each Spark task too)."""
    global _options
    if options != _options:
        _options = options
        _filesystem.cache_clear()


def current_options() -> StorageOptions:
    """The options to ship to Spark tasks: the endpoint and region this process found in its
    environment are filled in (not secret), so executors reach the same store; credentials stay
    with each executor's own chain (its environment, profile or instance role)."""
    return dataclasses.replace(_options, s3_endpoint=s3_endpoint(_options), s3_region=s3_region(_options))


# --- URIs -----------------------------------------------------------------------------------------

def scheme(uri: str) -> str:
    """'s3', 'gs', … or 'file' for local paths and file:// URIs."""
    match = _SCHEME.match(uri)
    return match.group(1).lower() if match else "file"


def is_local(uri: str) -> bool:
    return scheme(uri) == "file"


def normalize(uri: str) -> str:
    """Local paths become absolute paths (file:// stripped); remote URIs lose trailing slashes."""
    if is_local(uri):
        path = uri[len("file://"):] if uri.startswith("file://") else uri
        return os.path.abspath(os.path.expanduser(path))
    return uri.rstrip("/")


def join(base: str, *parts: str) -> str:
    """base/part/…, for local paths and URIs alike (never pathlib arithmetic on a URI)."""
    if is_local(base):
        return os.path.join(normalize(base), *parts)
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def parent(uri: str) -> str:
    if is_local(uri):
        return os.path.dirname(normalize(uri))
    head, _, tail = uri.rstrip("/").rpartition("/")
    return head if not head.endswith(":/") else uri  # a bucket root has no parent


def basename(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[2]


def relative(uri: str, root: str) -> str:
    """uri's path below root, with '/' separators (what a manifest records)."""
    uri, root = normalize(uri), normalize(root)
    if not uri.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"{uri} is not inside {root}")
    return uri[len(root.rstrip("/")) + 1:].replace(os.sep, "/")


def as_uri(uri: str) -> str:
    """A location as a URI: local paths become file:///…, as Spark names its input files."""
    return "file://" + normalize(uri) if is_local(uri) else uri


# --- filesystems ----------------------------------------------------------------------------------

def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(the pyarrow filesystem holding uri, uri's path inside it)."""
    kind = scheme(uri)
    if kind == "file":
        return _filesystem("file", "", _options), normalize(uri)
    rest = uri[len(kind) + 3:]
    authority, _, key = rest.partition("/")
    if kind in ("s3", "gs", "gcs"):
        return _filesystem(kind, "", _options), f"{authority}/{key}".rstrip("/")
    return _filesystem(kind, authority, _options), "/" + key if kind in ("hdfs", "viewfs") else rest


@functools.lru_cache(maxsize=16)
def _filesystem(kind: str, authority: str, options: StorageOptions) -> pafs.FileSystem:
    if kind == "file":
        return pafs.LocalFileSystem()
    if kind == "s3":
        return pafs.S3FileSystem(**s3_arguments(options))
    if kind in ("gs", "gcs"):
        return pafs.GcsFileSystem(anonymous=False)
    if kind in ("hdfs", "viewfs"):
        return pafs.HadoopFileSystem.from_uri(f"{kind}://{authority}")
    # Azure: pyarrow 14 has no native filesystem; adlfs (fsspec) behind pyarrow's handler.
    try:
        import adlfs
    except ImportError:
        raise StorageError(f"{kind}:// needs the adlfs package (pip install adlfs)") from None
    account = authority.partition("@")[2].split(".")[0] or None
    return pafs.PyFileSystem(pafs.FSSpecHandler(adlfs.AzureBlobFileSystem(account_name=account)))


def s3_endpoint(options: StorageOptions | None = None) -> str | None:
    options = options or _options
    return options.s3_endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def s3_region(options: StorageOptions | None = None) -> str | None:
    options = options or _options
    return options.s3_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def s3_arguments(options: StorageOptions) -> dict[str, Any]:
    """S3FileSystem arguments: credentials stay with the SDK's chain; endpoint and region added here."""
    arguments: dict[str, Any] = {
        "anonymous": options.s3_anonymous,
        "connect_timeout": options.connect_timeout_s,
        "request_timeout": options.request_timeout_s,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=options.max_attempts),
    }
    endpoint = s3_endpoint(options)
    if endpoint:
        found = re.match(r"^(https?)://(.+?)/?$", endpoint)
        arguments["scheme"], arguments["endpoint_override"] = (found.group(1), found.group(2)) if found else ("https", endpoint)
    region = s3_region(options)
    if region:
        arguments["region"] = region
    elif endpoint:
        arguments["region"] = "us-east-1"  # a custom endpoint (MinIO, a test server) has no region to look up
    return arguments


def credentials_source(uri: str) -> str:
    """Where this process's credentials for uri's store come from, for error messages (no secrets)."""
    kind = scheme(uri)
    if kind != "s3":
        return f"the {kind} client's default credential chain"
    if _options.s3_anonymous:
        return "none (storage.s3.anonymous is set)"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables"
    if os.environ.get("AWS_PROFILE"):
        return f"AWS_PROFILE={os.environ['AWS_PROFILE']} (~/.aws)"
    return "the AWS default chain (~/.aws, or the instance role)"


def describe(uri: str) -> str:
    """The store behind uri, as an error message names it."""
    kind = scheme(uri)
    if kind == "file":
        return "local disk"
    bucket = uri[len(kind) + 3:].partition("/")[0]
    where = f" at {s3_endpoint()}" if kind == "s3" and s3_endpoint() else ""
    return f"{kind} bucket {bucket!r}{where} (credentials: {credentials_source(uri)})"


@contextlib.contextmanager
def _errors(uri: str, action: str) -> Iterator[None]:
    """Turn a store's error into one line naming the store, the location and the credentials used."""
    try:
        yield
    except FileNotFoundError:
        raise
    except StorageError:
        raise
    except OSError as error:
        if is_local(uri):
            raise
        detail = " ".join(str(error).split())
        hint = ""
        if "ACCESS_DENIED" in detail or "AccessDenied" in detail or "403" in detail:
            hint = "; check those credentials and the bucket's permissions"
        raise StorageError(f"cannot {action} {uri} on {describe(uri)}: {detail}{hint}") from None


def check_reachable(uri: str) -> None:
    """Fail fast, in one line, when uri's bucket is missing or its credentials are refused, before
    a job starts (a missing bucket must not read as an empty dataset)."""
    kind = scheme(uri)
    if kind not in ("s3", "gs", "gcs"):
        return
    bucket = uri[len(kind) + 3:].partition("/")[0]
    fs, _ = filesystem(uri)
    with _errors(uri, "reach"):
        found = fs.get_file_info(bucket)
        if found.type == pafs.FileType.NotFound:
            raise StorageError(f"cannot reach {uri}: {describe(uri)} does not exist; create it or fix the URI")
        fs.get_file_info(pafs.FileSelector(bucket, recursive=False, allow_not_found=True))  # a listing needs the credentials


# --- reading and writing --------------------------------------------------------------------------

@dataclass(frozen=True)
class FileEntry:
    uri: str
    size: int
    mtime_ns: int | None  # None where the store keeps no modification time


def info(uri: str) -> FileEntry | None:
    """The file at uri, or None when there is none (a directory is None too)."""
    fs, path = filesystem(uri)
    with _errors(uri, "look up"):
        found = fs.get_file_info(path)
    if found.type != pafs.FileType.File:
        return None
    return FileEntry(uri if not is_local(uri) else normalize(uri), found.size, found.mtime_ns)


def exists(uri: str) -> bool:
    """A file or a directory (on object stores: any key below it) is there."""
    fs, path = filesystem(uri)
    with _errors(uri, "look up"):
        kind = fs.get_file_info(path).type
    return kind != pafs.FileType.NotFound


def is_dir(uri: str) -> bool:
    fs, path = filesystem(uri)
    with _errors(uri, "look up"):
        return fs.get_file_info(path).type == pafs.FileType.Directory


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with _errors(uri, "read"), fs.open_input_stream(path, compression=None) as stream:
        return stream.read()


def read_text(uri: str) -> str:
    return read_bytes(uri).decode("utf-8")


def write_bytes(uri: str, data: bytes) -> None:
    """Write a whole file so that a reader sees the old one or the new one, never a part: on local
    disk via a temporary file and a rename, on object stores as one PUT."""
    fs, path = filesystem(uri)
    if is_local(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        return
    with _errors(uri, "write"), fs.open_output_stream(path, compression=None) as stream:
        stream.write(data)


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def open_input(uri: str):
    """A seekable binary file (pyarrow's NativeFile), to be used as a context manager."""
    fs, path = filesystem(uri)
    with _errors(uri, "open"):
        return fs.open_input_file(path)


class _NativeRaw(io.RawIOBase):
    """pyarrow's input file as a Python raw stream, so io.BufferedReader can give it readline()."""

    def __init__(self, native):
        self._native = native

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._native.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._native.seek(offset, whence)

    def tell(self) -> int:
        return self._native.tell()

    def close(self) -> None:
        self._native.close()
        super().close()


def open_binary(uri: str, buffer_bytes: int = 1 << 20) -> io.BufferedReader:
    """A buffered, seekable Python binary file (readline, gzip/bz2/csv can wrap it)."""
    return io.BufferedReader(_NativeRaw(open_input(uri)), buffer_size=buffer_bytes)


def open_output(uri: str):
    """A binary output stream, written in place (use for files nobody reads before a commit file)."""
    fs, path = filesystem(uri)
    if is_local(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with _errors(uri, "write"):
        return fs.open_output_stream(path, compression=None)


def makedirs(uri: str) -> None:
    """Create a directory (object stores have none: nothing to do there)."""
    if is_local(uri):
        os.makedirs(normalize(uri), exist_ok=True)


def delete(uri: str) -> None:
    """Delete a file if it is there."""
    fs, path = filesystem(uri)
    with _errors(uri, "delete"), contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def delete_tree(uri: str) -> None:
    """Delete a directory and everything below it, if it is there."""
    fs, path = filesystem(uri)
    if not exists(uri):
        return
    with _errors(uri, "delete"), contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


def list_files(uri: str, recursive: bool = True) -> list[FileEntry]:
    """Every file below the directory uri (sorted by URI); none when it does not exist."""
    fs, path = filesystem(uri)
    with _errors(uri, "list"):
        entries = fs.get_file_info(pafs.FileSelector(path, recursive=recursive, allow_not_found=True))
    root = normalize(uri)
    found = [
        FileEntry(join(root, e.path[len(path):].lstrip("/")) if e.path.startswith(path) else e.path, e.size, e.mtime_ns)
        for e in entries if e.type == pafs.FileType.File
    ]
    return sorted(found, key=lambda e: e.uri)


def glob(pattern: str) -> list[FileEntry]:
    """Files matching a glob (`*`, `?`, `[…]` within a name; `**` across directories), sorted."""
    pattern = normalize(pattern)
    match = _GLOB_CHARS.search(pattern)
    if match is None:
        entry = info(pattern)
        return [entry] if entry else []
    base = pattern[: match.start()].rpartition("/")[0] or "/"
    regex = _glob_regex(pattern)
    return [e for e in list_files(base, recursive=True) if regex.match(e.uri)]


def _glob_regex(pattern: str) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i:end + 1])[4:-3])  # fnmatch's class syntax
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def sha256(uri: str) -> str:
    digest = hashlib.sha256()
    with open_input(uri) as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- directories between local disk and a store ---------------------------------------------------

def upload_dir(local_dir: str, uri: str) -> list[str]:
    """Copy every file of a local directory to uri/…; returns the names written (relative)."""
    names = []
    for root, _, files in os.walk(local_dir):
        for name in sorted(files):
            relative_name = os.path.relpath(os.path.join(root, name), local_dir).replace(os.sep, "/")
            with open(os.path.join(root, name), "rb") as handle:
                write_bytes(join(uri, relative_name), handle.read())
            names.append(relative_name)
    return sorted(names)


def download_dir(uri: str, local_dir: str) -> str:
    """Copy every file below uri into local_dir (created); returns local_dir."""
    os.makedirs(local_dir, exist_ok=True)
    root = normalize(uri)
    for entry in list_files(root):
        target = os.path.join(local_dir, *relative(entry.uri, root).split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(read_bytes(entry.uri))
    return local_dir


@contextlib.contextmanager
def local_dir_for(uri: str) -> Iterator[str]:
    """A local directory holding uri's files: uri itself when local, else a temporary copy."""
    if is_local(uri):
        yield normalize(uri)
        return
    with tempfile.TemporaryDirectory(prefix="shardline-") as tmp:
        yield download_dir(uri, os.path.join(tmp, basename(uri) or "dir"))


COMMIT_FILE = "_SUCCESS"


@contextlib.contextmanager
def staged_local_dir(uri: str) -> Iterator[str]:
    """A local directory to fill; on success it becomes uri, committed by uri/_SUCCESS written last
    (local: the directory is renamed into place whole; a store: the old commit file is deleted
    first, the old files next, then the new files are uploaded and the commit file written)."""
    if is_local(uri):
        final = normalize(uri)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.tmp-", dir=os.path.dirname(final))
        try:
            yield staging
            with open(os.path.join(staging, COMMIT_FILE), "wb"):
                pass
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _swap_in_local_dir(staging, final)
        return
    with tempfile.TemporaryDirectory(prefix="shardline-") as tmp:
        yield tmp
        delete(join(uri, COMMIT_FILE))
        delete_tree(uri)
        upload_dir(tmp, uri)
        write_bytes(join(uri, COMMIT_FILE), b"")


def is_committed(uri: str) -> bool:
    """A directory written by staged_local_dir (or a published dataset) is complete."""
    return info(join(uri, COMMIT_FILE)) is not None


def _swap_in_local_dir(staging: str, final: str) -> None:
    """Put a finished local staging directory at final; an existing one is moved aside first."""
    if os.path.exists(final):
        retired = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.old-{uuid.uuid4().hex[:8]}")
        os.replace(final, retired)
        os.replace(staging, final)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staging, final)

