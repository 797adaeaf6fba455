#!/usr/bin/env python3
"""Smoke check of the S3 endpoint that .ci/s3-server.sh starts.

    python3 -m venv /tmp/s3venv && /tmp/s3venv/bin/pip install boto3
    set -a; eval "$(.ci/s3-server.sh start)"; set +a
    /tmp/s3venv/bin/python .ci/s3-smoke.py

Reads VOUCH_S3_ENDPOINT, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
Prints one line per check (PASS / FAIL / INFO) and exits 1 if a check that
must pass failed. The If-None-Match and Object Lock lines say what this
server does; docs/s3-server.md records the answers for RGW 16.2.
"""
import datetime
import os
import sys
import time
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

failed = []


def report(ok, name, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        failed.append(name)


def info(name, detail):
    print(f"INFO {name}: {detail}")


def code(e):
    return e.response.get("Error", {}).get("Code"), e.response["ResponseMetadata"]["HTTPStatusCode"]


def client(checksums):
    cfg = dict(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
    if not checksums:
        # botocore >= 1.36 sends CRC32 checksums by default (aws-chunked
        # bodies with trailers); "when_required" restores the old behaviour.
        cfg.update(request_checksum_calculation="when_required",
                   response_checksum_validation="when_required")
    return boto3.client(
        "s3",
        endpoint_url=os.environ["VOUCH_S3_ENDPOINT"],
        region_name="us-east-1",
        config=Config(**cfg),
    )


def main():
    s3 = client(checksums=False)
    run = uuid.uuid4().hex[:8]
    b = f"smoke-{run}"

    # Buckets and plain objects.
    s3.create_bucket(Bucket=b)
    report(b in [x["Name"] for x in s3.list_buckets()["Buckets"]], "create/list bucket")
    body = os.urandom(100_000)
    s3.put_object(Bucket=b, Key="dir/a", Body=body)
    s3.put_object(Bucket=b, Key="dir/b", Body=b"b")
    report(s3.get_object(Bucket=b, Key="dir/a")["Body"].read() == body, "put/get object")
    r = s3.get_object(Bucket=b, Key="dir/a", Range="bytes=10-19")
    report(r["Body"].read() == body[10:20], "ranged get")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=b, Prefix="dir/")["Contents"]]
    report(keys == ["dir/a", "dir/b"], "list_objects_v2", str(keys))
    s3.delete_object(Bucket=b, Key="dir/b")
    try:
        s3.head_object(Bucket=b, Key="dir/b")
        report(False, "delete object", "still there")
    except ClientError as e:
        report(code(e)[1] == 404, "delete object", str(code(e)))
    s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "dir/a"}]})
    report(s3.list_objects_v2(Bucket=b).get("KeyCount") == 0, "delete_objects (batch)")

    # Default boto3 (flexible checksums on): does RGW 16 take it?
    try:
        client(checksums=True).put_object(Bucket=b, Key="crc", Body=b"x" * 1000)
        info("put with botocore default checksums", "accepted")
    except ClientError as e:
        info("put with botocore default checksums", f"refused {code(e)}")

    # Multipart upload: 2 parts of 5 MiB and a last one of 1 MiB.
    parts_data = [os.urandom(5 << 20), os.urandom(5 << 20), os.urandom(1 << 20)]
    up = s3.create_multipart_upload(Bucket=b, Key="mp")
    parts = []
    for i, d in enumerate(parts_data, 1):
        etag = s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=i, Body=d)["ETag"]
        parts.append({"PartNumber": i, "ETag": etag})
    s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
    got = s3.get_object(Bucket=b, Key="mp")
    report(got["Body"].read() == b"".join(parts_data), "multipart upload", f"ETag {got['ETag']}")
    up2 = s3.create_multipart_upload(Bucket=b, Key="mp-aborted")
    s3.abort_multipart_upload(Bucket=b, Key="mp-aborted", UploadId=up2["UploadId"])
    report(not s3.list_multipart_uploads(Bucket=b).get("Uploads"), "abort multipart upload")

    # Conditional put: If-None-Match: * must fail with 412 when the key exists.
    s3.put_object(Bucket=b, Key="cond", Body=b"first", IfNoneMatch="*")
    try:
        s3.put_object(Bucket=b, Key="cond", Body=b"second", IfNoneMatch="*")
        kept = s3.get_object(Bucket=b, Key="cond")["Body"].read()
        info("If-None-Match: * on an existing key", f"NOT honoured: second put succeeded, object is now {kept!r}")
    except ClientError as e:
        kept = s3.get_object(Bucket=b, Key="cond")["Body"].read()
        info("If-None-Match: * on an existing key", f"honoured: {code(e)}, object still {kept!r}")
    # If-Match with a wrong ETag (supported by newer botocore as IfMatch).
    try:
        s3.put_object(Bucket=b, Key="cond", Body=b"third", IfMatch='"00000000000000000000000000000000"')
        info("If-Match: <wrong etag> on put", "NOT honoured: put succeeded")
    except ClientError as e:
        info("If-Match: <wrong etag> on put", f"honoured: {code(e)}")

    # The same on a bucket with versioning enabled (Object Lock buckets are).
    cb = f"smoke-condver-{run}"
    s3.create_bucket(Bucket=cb)
    s3.put_bucket_versioning(Bucket=cb, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=cb, Key="cond", Body=b"first", IfNoneMatch="*")
    try:
        s3.put_object(Bucket=cb, Key="cond", Body=b"second", IfNoneMatch="*")
        info("If-None-Match: * in a versioned bucket", "NOT honoured: second put made a new version")
    except ClientError as e:
        info("If-None-Match: * in a versioned bucket", f"honoured: {code(e)}")
    # And on CompleteMultipartUpload over an existing key.
    up = s3.create_multipart_upload(Bucket=b, Key="cond")
    etag = s3.upload_part(Bucket=b, Key="cond", UploadId=up["UploadId"], PartNumber=1, Body=b"mp")["ETag"]
    try:
        s3.complete_multipart_upload(Bucket=b, Key="cond", UploadId=up["UploadId"], IfNoneMatch="*",
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        info("If-None-Match: * on CompleteMultipartUpload", "NOT honoured: existing object replaced")
        s3.put_object(Bucket=b, Key="cond", Body=b"first")
    except ClientError as e:
        info("If-None-Match: * on CompleteMultipartUpload", f"honoured: {code(e)}")

    # Versioning.
    vb = f"smoke-ver-{run}"
    s3.create_bucket(Bucket=vb)
    s3.put_bucket_versioning(Bucket=vb, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=vb, Key="k", Body=b"v1")["VersionId"]
    v2 = s3.put_object(Bucket=vb, Key="k", Body=b"v2")["VersionId"]
    s3.delete_object(Bucket=vb, Key="k")
    vers = s3.list_object_versions(Bucket=vb)
    old = s3.get_object(Bucket=vb, Key="k", VersionId=v1)["Body"].read()
    report(len(vers.get("Versions", [])) == 2 and len(vers.get("DeleteMarkers", [])) == 1 and old == b"v1",
           "versioning", f"versions {v1}, {v2}, one delete marker, old version readable")

    # Object Lock: COMPLIANCE retention must refuse deleting the version.
    lb = f"smoke-lock-{run}"
    s3.create_bucket(Bucket=lb, ObjectLockEnabledForBucket=True)
    cfg = s3.get_object_lock_configuration(Bucket=lb)["ObjectLockConfiguration"]
    info("object lock configuration", str(cfg))
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    r = s3.put_object(Bucket=lb, Key="locked", Body=b"keep me",
                      ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=until)
    vid = r["VersionId"]
    ret = s3.get_object_retention(Bucket=lb, Key="locked", VersionId=vid)["Retention"]
    info("retention read back", str(ret))
    try:
        s3.delete_object(Bucket=lb, Key="locked", VersionId=vid)
        report(False, "Object Lock COMPLIANCE: delete of the version", "DELETED (lock not enforced)")
    except ClientError as e:
        report(code(e)[1] == 403, "Object Lock COMPLIANCE: delete of the version", f"refused {code(e)}")
    try:
        s3.put_object_retention(Bucket=lb, Key="locked", VersionId=vid,
                                Retention={"Mode": "COMPLIANCE",
                                           "RetainUntilDate": until - datetime.timedelta(hours=1)})
        report(False, "Object Lock COMPLIANCE: shortening retention", "allowed")
    except ClientError as e:
        report(code(e)[1] == 403, "Object Lock COMPLIANCE: shortening retention", f"refused {code(e)}")
    try:
        s3.delete_object(Bucket=lb, Key="locked", VersionId=vid, BypassGovernanceRetention=True)
        report(False, "Object Lock COMPLIANCE: delete with governance bypass", "DELETED")
    except ClientError as e:
        report(code(e)[1] == 403, "Object Lock COMPLIANCE: delete with governance bypass", f"refused {code(e)}")
    # A plain delete only adds a delete marker; the locked version stays.
    s3.delete_object(Bucket=lb, Key="locked")
    still = s3.get_object(Bucket=lb, Key="locked", VersionId=vid)["Body"].read()
    report(still == b"keep me", "Object Lock: locked version survives a plain delete (delete marker)")
    # Default retention on the bucket (GOVERNANCE, 1 day) applies to new objects.
    s3.put_object_lock_configuration(Bucket=lb, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    vid2 = s3.put_object(Bucket=lb, Key="default", Body=b"d")["VersionId"]
    try:
        s3.delete_object(Bucket=lb, Key="default", VersionId=vid2)
        report(False, "Object Lock default GOVERNANCE retention: delete", "DELETED")
    except ClientError as e:
        report(code(e)[1] == 403, "Object Lock default GOVERNANCE retention: delete", f"refused {code(e)}")
    try:
        s3.delete_object(Bucket=lb, Key="default", VersionId=vid2, BypassGovernanceRetention=True)
        info("GOVERNANCE delete with bypass by the bucket owner", "allowed")
    except ClientError as e:
        info("GOVERNANCE delete with bypass by the bucket owner", f"refused {code(e)}")

    # Presigned URL (query-string SigV4).
    import urllib.request
    for sig in ("s3v4", "s3"):
        presigner = boto3.client("s3", endpoint_url=os.environ["VOUCH_S3_ENDPOINT"], region_name="us-east-1",
                                 config=Config(s3={"addressing_style": "path"}, signature_version=sig))
        url = presigner.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "cond"}, ExpiresIn=60)
        with urllib.request.urlopen(url) as resp:
            report(resp.status == 200, f"presigned GET ({'SigV4' if sig == 's3v4' else 'SigV2'} query string)",
                   "X-Amz-Signature" if "X-Amz-Signature" in url else "Signature")

    # Bulk: 200 small puts, timed.
    t = time.monotonic()
    for i in range(200):
        s3.put_object(Bucket=b, Key=f"bulk/{i:04d}", Body=os.urandom(4096))
    dt = time.monotonic() - t
    n = sum(p.get("KeyCount", 0) for p in s3.get_paginator("list_objects_v2").paginate(
        Bucket=b, Prefix="bulk/", PaginationConfig={"PageSize": 50}))
    report(n == 200, "200 puts of 4 KiB + paginated list", f"{200 / dt:.0f} puts/s")
    t = time.monotonic()
    big = os.urandom(64 << 20)
    s3.put_object(Bucket=b, Key="big", Body=big)
    put_s = time.monotonic() - t
    t = time.monotonic()
    ok = s3.get_object(Bucket=b, Key="big")["Body"].read() == big
    get_s = time.monotonic() - t
    report(ok, "64 MiB object", f"put {64 / put_s:.0f} MiB/s, get {64 / get_s:.0f} MiB/s")

    print(f"{'FAILED: ' + ', '.join(failed) if failed else 'all required checks passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
