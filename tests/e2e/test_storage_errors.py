"""Bad credentials and a missing bucket on a real S3 server that checks signatures (moto with IAM
authentication): one line naming the store, the bucket and where the credentials came from, within
seconds; never a hang, a traceback or an empty dataset."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def authenticating_s3(tmp_path_factory):
    """moto_server that enforces credentials after its first three (set-up) requests."""
    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.2)
        setup = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="shardline")
        key = iam.create_access_key(UserName="shardline")["AccessKey"]
        iam.put_user_policy(UserName="shardline", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        boto3.client("s3", **{**setup, "aws_access_key_id": key["AccessKeyId"],
                              "aws_secret_access_key": key["SecretAccessKey"]}).create_bucket(Bucket="guarded")
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def _shardline(endpoint, key_id, secret, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID=key_id,
               AWS_SECRET_ACCESS_KEY=secret, PYTHONPATH=str(REPO_ROOT))
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", *args, "--config", "configs/demo.yaml",
                             "--set", "data.input=s3://guarded/corpus/*.jsonl"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    return result, time.monotonic() - started


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["train"]])
def test_wrong_secret_is_one_line_naming_store_bucket_and_credential_source(authenticating_s3, command):
    endpoint, key_id, secret = authenticating_s3
    result, seconds = _shardline(endpoint, key_id, "not-the-secret", *command, "--set", "run_dir=s3://guarded/runs/a")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "s3 bucket 'guarded'" in lines[0] and endpoint in lines[0]
    assert "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables" in lines[0]
    assert "not-the-secret" not in result.stderr + result.stdout and "Traceback" not in result.stderr
    assert seconds < 30


def test_a_missing_bucket_is_named_and_nothing_is_written(authenticating_s3, tmp_path):
    endpoint, key_id, secret = authenticating_s3
    result, seconds = _shardline(endpoint, key_id, secret, "run", "--set", "run_dir=s3://no-such-bucket/runs/a")
    assert result.returncode == 2, result.stderr
    assert "s3 bucket 'no-such-bucket'" in result.stderr and "does not exist" in result.stderr
    assert not (REPO_ROOT / "s3:").exists()
    assert seconds < 30
