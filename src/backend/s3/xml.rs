//! The few XML documents of the S3 API the backend reads and writes.

use serde::Deserialize;

/// `ListObjectsV2`'s answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListBucketResult {
    #[serde(default)]
    pub is_truncated: bool,
    #[serde(default)]
    pub contents: Vec<Object>,
    pub next_continuation_token: Option<String>,
}

/// One object of a listing.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Object {
    pub key: String,
    #[serde(default)]
    pub size: u64,
}

/// `CreateMultipartUpload`'s answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InitiateMultipartUploadResult {
    pub upload_id: String,
}

/// `ListMultipartUploads`'s answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListMultipartUploadsResult {
    #[serde(default)]
    pub is_truncated: bool,
    #[serde(default)]
    pub upload: Vec<Upload>,
    pub next_key_marker: Option<String>,
    pub next_upload_id_marker: Option<String>,
}

/// An upload in progress.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Upload {
    pub key: String,
    pub upload_id: String,
}

/// An error answer (also the body of a failed `CompleteMultipartUpload`
/// answered with 200).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct S3Error {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// `GetObjectLockConfiguration`'s answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ObjectLockConfiguration {
    #[serde(default)]
    pub object_lock_enabled: String,
}

/// `GetObjectRetention`'s answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Retention {
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub retain_until_date: String,
}

/// Parses `body` as `T`.
pub fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    quick_xml::de::from_str(text).map_err(|e| format!("unexpected XML: {e}"))
}

/// Escapes text for an XML element.
pub fn escape(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}

/// The body completing a multipart upload of parts with these ETags.
pub fn complete_multipart(etags: &[String]) -> String {
    let mut out = String::from("<CompleteMultipartUpload>");
    for (i, etag) in etags.iter().enumerate() {
        out.push_str(&format!(
            "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
            i + 1,
            escape(etag)
        ));
    }
    out.push_str("</CompleteMultipartUpload>");
    out
}

/// The body of `PutObjectRetention` (compliance mode).
pub fn retention(until_rfc3339: &str) -> String {
    format!(
        "<Retention xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Mode>COMPLIANCE</Mode><RetainUntilDate>{}</RetainUntilDate></Retention>",
        escape(until_rfc3339)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_parses_with_and_without_contents() {
        let page: ListBucketResult = parse(
            br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>
<Contents><Key>p/index/a</Key><LastModified>2026-12-06T03:00:00.000Z</LastModified><ETag>"x"</ETag><Size>10</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>p/index/b</Key><Size>0</Size></Contents></ListBucketResult>"#,
        )
        .unwrap();
        assert!(page.is_truncated);
        assert_eq!(page.next_continuation_token.as_deref(), Some("tok&1"));
        assert_eq!(page.contents.len(), 2);
        assert_eq!(
            (page.contents[0].key.as_str(), page.contents[0].size),
            ("p/index/a", 10)
        );
        let empty: ListBucketResult = parse(
            b"<ListBucketResult><Name>b</Name><IsTruncated>false</IsTruncated></ListBucketResult>",
        )
        .unwrap();
        assert!(empty.contents.is_empty() && !empty.is_truncated);
    }

    #[test]
    fn errors_uploads_and_documents_round_trip() {
        let e: S3Error = parse(
            b"<Error><Code>SlowDown</Code><Message>Please reduce</Message><RequestId>1</RequestId></Error>",
        )
        .unwrap();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("SlowDown", "Please reduce")
        );
        let u: InitiateMultipartUploadResult = parse(
            b"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>2~abc</UploadId></InitiateMultipartUploadResult>",
        )
        .unwrap();
        assert_eq!(u.upload_id, "2~abc");
        assert_eq!(
            complete_multipart(&["\"a&b\"".into()]),
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;a&amp;b&quot;</ETag></Part></CompleteMultipartUpload>"
        );
        let r: Retention = parse(retention("2030-01-01T00:00:00Z").as_bytes()).unwrap();
        assert_eq!(
            (r.mode.as_str(), r.retain_until_date.as_str()),
            ("COMPLIANCE", "2030-01-01T00:00:00Z")
        );
    }
}
