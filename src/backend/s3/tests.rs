//! The backend against a real S3 store: `VOUCH_S3_ENDPOINT` and the AWS
//! keys, as `.ci/s3-server.sh start` prints them (Ceph's RADOS Gateway).
//! Without them the tests say so and pass, except under CI, where a missing
//! store is a failure.

use super::*;
use crate::backend::tests::conformance;

/// The bucket the tests share; each test works below its own prefix.
pub(crate) const TEST_BUCKET: &str = "vouch-tests";

/// A backend on a fresh prefix of the test bucket, or `None` (and a note)
/// without a store outside CI.
pub(crate) fn test_backend(options: S3Options) -> Option<S3Backend> {
    let Ok(endpoint) = std::env::var("VOUCH_S3_ENDPOINT") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the S3 tests: start the store with `eval \"$(.ci/s3-server.sh start)\"`"
        );
        eprintln!("VOUCH_S3_ENDPOINT is not set: S3 test skipped (see .ci/s3-server.sh)");
        return None;
    };
    let prefix = hex::encode(crate::crypto::random_array::<6>());
    let location = S3Location::parse(&format!("s3:{endpoint}/{TEST_BUCKET}/t/{prefix}")).unwrap();
    let b = S3Backend::new(location, Credentials::from_environment().unwrap(), options).unwrap();
    if !b.bucket_exists().unwrap() {
        b.create_bucket(false).unwrap();
    }
    Some(b)
}

fn quick() -> S3Options {
    S3Options {
        client: ClientOptions {
            attempts: 3,
            backoff: Duration::from_millis(50),
            timeout: Duration::from_secs(30),
            ..S3Options::default().client
        },
        ..S3Options::default()
    }
}

#[test]
fn s3_backend_conforms() {
    let Some(b) = test_backend(quick()) else {
        return;
    };
    conformance(&b);
    assert!(b.traffic().unwrap().requests > 10);
}

#[test]
fn listings_are_paginated_and_keep_kinds_apart() {
    let Some(b) = test_backend(S3Options {
        page_size: Some(2),
        ..quick()
    }) else {
        return;
    };
    b.create().unwrap();
    let mut names: Vec<String> = (0..5u8)
        .map(|i| format!("{:02x}{}", i * 40, "7".repeat(62)))
        .collect();
    names.sort();
    for n in &names {
        b.write(FileKind::Pack, n, n.as_bytes(), WriteSync::Now)
            .unwrap();
    }
    b.write(FileKind::Index, "i1", b"x", WriteSync::Now)
        .unwrap();
    let listed: Vec<String> = b
        .list(FileKind::Pack)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(listed, names, "five packs over three pages of two");
    assert_eq!(b.list(FileKind::Index).unwrap(), vec![("i1".to_owned(), 1)]);
    assert_eq!(b.list(FileKind::Config).unwrap(), vec![]);
}

#[test]
fn a_large_file_goes_up_in_parts_and_an_abandoned_upload_is_removed() {
    let Some(b) = test_backend(S3Options {
        multipart_threshold: 6 << 20,
        part_size: 5 << 20,
        ..quick()
    }) else {
        return;
    };
    b.create().unwrap();
    let data: Vec<u8> = (0..(12 << 20) + 17).map(|i: u32| (i % 251) as u8).collect();
    let name = "cd".to_string() + &"4".repeat(62);
    b.write(FileKind::Pack, &name, &data, WriteSync::Now)
        .unwrap();
    assert_eq!(b.read(FileKind::Pack, &name).unwrap(), data);
    assert_eq!(
        b.read_range(FileKind::Pack, &name, (10 << 20) + 3, 9)
            .unwrap(),
        &data[(10 << 20) + 3..(10 << 20) + 12]
    );
    assert!(
        b.uploads_in_progress().unwrap().is_empty(),
        "a completed upload is not in progress"
    );
    // A writer killed between its parts leaves an upload the store keeps
    // (and bills) but nobody sees.
    let key = b.key(FileKind::Pack, &("ef".to_string() + &"5".repeat(62)));
    let a = b
        .get_ok(
            Request::new(Method::POST, b.path(&key, &[("uploads", "")])),
            "start",
        )
        .unwrap();
    let id = xml::parse::<xml::InitiateMultipartUploadResult>(&a.body)
        .unwrap()
        .upload_id;
    b.get_ok(
        Request::new(
            Method::PUT,
            b.path(&key, &[("partNumber", "1"), ("uploadId", &id)]),
        )
        .octets(Bytes::from_static(b"part")),
        "part",
    )
    .unwrap();
    assert_eq!(
        b.list(FileKind::Pack).unwrap().len(),
        1,
        "an unfinished upload is invisible"
    );
    assert_eq!(b.uploads_in_progress().unwrap().len(), 1);
    assert_eq!(b.remove_temporary().unwrap(), 1);
    assert!(b.uploads_in_progress().unwrap().is_empty());
}

#[test]
fn small_files_are_read_with_a_bound_and_wrong_keys_are_named() {
    let Some(b) = test_backend(quick()) else {
        return;
    };
    b.create().unwrap();
    let big = vec![b' '; MAX_SMALL_FILE as usize + 1];
    b.write(FileKind::Lock, "big", &big, WriteSync::Now)
        .unwrap();
    let err = b.read(FileKind::Lock, "big").unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
    b.write(FileKind::Lock, "empty", b"", WriteSync::Now)
        .unwrap();
    assert_eq!(b.read(FileKind::Lock, "empty").unwrap(), b"");
    let err = b.read(FileKind::Snapshot, "missing").unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err}"
    );

    let wrong = S3Backend::new(
        b.location.clone(),
        Credentials {
            access_key_id: std::env::var("AWS_ACCESS_KEY_ID").unwrap(),
            secret_access_key: zeroize::Zeroizing::new("not-the-secret".into()),
            session_token: None,
        },
        quick(),
    )
    .unwrap();
    let err = wrong.list(FileKind::Index).unwrap_err();
    assert!(err.to_string().contains("refused the credentials"), "{err}");
    assert!(!err.to_string().contains("not-the-secret"), "{err}");
}

#[test]
fn virtual_hosted_addressing_puts_the_bucket_in_the_host() {
    let l = S3Location::parse("s3:https://s3.eu-central-1.amazonaws.com/my-bucket/host1").unwrap();
    assert_eq!(l.origin(false), "https://s3.eu-central-1.amazonaws.com");
    assert_eq!(
        l.origin(true),
        "https://my-bucket.s3.eu-central-1.amazonaws.com"
    );
    let creds = Credentials {
        access_key_id: "AK".into(),
        secret_access_key: zeroize::Zeroizing::new("S".into()),
        session_token: None,
    };
    let b = S3Backend::new(
        l.clone(),
        creds.clone(),
        S3Options {
            virtual_hosted: true,
            ..S3Options::default()
        },
    )
    .unwrap();
    assert_eq!(
        b.path(&b.key(FileKind::Index, "ab"), &[]),
        "/host1/index/ab"
    );
    assert_eq!(b.path("", &[("list-type", "2")]), "/?list-type=2");
    let b = S3Backend::new(l, creds, S3Options::default()).unwrap();
    assert_eq!(
        b.path(&b.key(FileKind::Index, "ab"), &[]),
        "/my-bucket/host1/index/ab"
    );
    assert_eq!(b.path("", &[("list-type", "2")]), "/my-bucket?list-type=2");
}

#[test]
fn locations_parse_and_refuse_what_is_not_one() {
    let l = S3Location::parse("s3:https://s3.example.com:8443/bucket-1/a/b/").unwrap();
    assert_eq!(
        (l.endpoint.as_str(), l.bucket.as_str(), l.prefix.as_str()),
        ("https://s3.example.com:8443", "bucket-1", "a/b")
    );
    assert_eq!(l.to_string(), "s3:https://s3.example.com:8443/bucket-1/a/b");
    let l = S3Location::parse("s3:http://127.0.0.1:7480/vouch").unwrap();
    assert_eq!((l.bucket.as_str(), l.prefix.as_str()), ("vouch", ""));
    for bad in [
        "https://h/b",
        "s3:https://h",
        "s3:https://h/B",
        "s3:https://key:secret@h/b",
        "s3:https://h/b/../x",
        "s3:ftp://h/b",
    ] {
        assert!(S3Location::parse(bad).is_err(), "{bad} parsed");
    }
}
