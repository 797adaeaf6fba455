//! AWS Signature Version 4 for S3 requests, in the header form (never in
//! the URL: a signed URL is a credential anyone who logs it can replay).
//! The HMAC-SHA256 and SHA-256 are `ring`'s, already in the tree for TLS.
//! Checked against the examples AWS publishes (tests below) and by every
//! request a real RADOS Gateway accepts (tests/s3.rs).

use ring::{digest, hmac};

/// The hash of an empty body.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// What a request is signed with.
pub struct SigningKey<'a> {
    /// Access key id.
    pub access_key_id: &'a str,
    /// Secret access key.
    pub secret_access_key: &'a str,
    /// Region (`us-east-1` for most non-AWS stores).
    pub region: &'a str,
}

/// A request to sign: method, the path and query as sent (already encoded,
/// the query in [`canonical_query`] form), and the headers that are signed
/// (lower-case names; `host`, `x-amz-date` and `x-amz-content-sha256`
/// among them).
pub struct ToSign<'a> {
    /// `GET`, `PUT`...
    pub method: &'a str,
    /// The encoded path, `/bucket/key`.
    pub path: &'a str,
    /// The canonical query string (see [`canonical_query`]).
    pub query: &'a str,
    /// Signed headers, lower-case names.
    pub headers: &'a [(String, String)],
    /// Hex SHA-256 of the body (or `UNSIGNED-PAYLOAD`).
    pub payload_sha256: &'a str,
    /// `YYYYMMDD'T'HHMMSS'Z'`.
    pub amz_date: &'a str,
}

/// Hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(digest::digest(&digest::SHA256, data))
}

/// RFC 3986 encoding as SigV4 wants it: unreserved characters kept, every
/// other byte `%XX` (upper case); `/` kept when `keep_slash`.
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The encoded query string, pairs sorted (the canonical form, and what is
/// sent, so the two never differ).
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> hmac::Tag {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
}

/// The `Authorization` header's value for `req`.
pub fn authorization(key: &SigningKey<'_>, req: &ToSign<'_>) -> String {
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.to_ascii_lowercase(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let signed_headers = headers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        req.method, req.path, req.query, req.payload_sha256
    );
    let date = &req.amz_date[..8.min(req.amz_date.len())];
    let scope = format!("{date}/{}/s3/aws4_request", key.region);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        req.amz_date,
        sha256_hex(canonical_request.as_bytes())
    );
    let secret = zeroize::Zeroizing::new(format!("AWS4{}", key.secret_access_key));
    let k_date = hmac_sha256(secret.as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(k_date.as_ref(), key.region.as_bytes());
    let k_service = hmac_sha256(k_region.as_ref(), b"s3");
    let k_signing = hmac_sha256(k_service.as_ref(), b"aws4_request");
    let signature = hex::encode(hmac_sha256(k_signing.as_ref(), string_to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        key.access_key_id
    )
}

/// `YYYYMMDD'T'HHMMSS'Z'` of `t`.
pub fn amz_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let dt =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The credentials of AWS's published SigV4 examples for S3
    /// ("Signature Calculations for the Authorization Header").
    const EXAMPLE: SigningKey<'static> = SigningKey {
        access_key_id: "AKIAIOSFODNN7EXAMPLE",
        secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        region: "us-east-1",
    };

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn aws_example_get_object_with_a_range() {
        let headers = h(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        let auth = authorization(
            &EXAMPLE,
            &ToSign {
                method: "GET",
                path: "/test.txt",
                query: "",
                headers: &headers,
                payload_sha256: EMPTY_SHA256,
                amz_date: "20130524T000000Z",
            },
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn aws_example_list_objects_with_a_query() {
        let headers = h(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        let query = h(&[("prefix", "J"), ("max-keys", "2")]);
        let auth = authorization(
            &EXAMPLE,
            &ToSign {
                method: "GET",
                path: "/",
                query: &canonical_query(&query),
                headers: &headers,
                payload_sha256: EMPTY_SHA256,
                amz_date: "20130524T000000Z",
            },
        );
        assert!(
            auth.ends_with(
                "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
            ),
            "{auth}"
        );
    }

    #[test]
    fn aws_example_put_object_signs_the_body_hash() {
        let body = b"Welcome to Amazon S3.";
        let payload = sha256_hex(body);
        assert_eq!(
            payload,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        );
        let headers = h(&[
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", &payload),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ]);
        let auth = authorization(
            &EXAMPLE,
            &ToSign {
                method: "PUT",
                path: &format!("/{}", uri_encode("test$file.text", true)),
                query: "",
                headers: &headers,
                payload_sha256: &payload,
                amz_date: "20130524T000000Z",
            },
        );
        assert!(
            auth.ends_with(
                "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
            ),
            "{auth}"
        );
    }

    #[test]
    fn encoding_keeps_only_unreserved_characters() {
        assert_eq!(uri_encode("a b/c+d~", true), "a%20b/c%2Bd~");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
        assert_eq!(
            canonical_query(&h(&[("uploads", ""), ("prefix", "x/y")])),
            "prefix=x%2Fy&uploads="
        );
        assert_eq!(
            amz_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1369353600)),
            "20130524T000000Z"
        );
    }
}
