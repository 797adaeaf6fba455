//! `POST /api/v1/repositories/{id}/verify-reports`: what a `vouch verify`
//! run by hand (the CLI) found in a repository this service owns, recorded
//! in the log as `verification.passed` / `verification.failed` (job: none)
//! for the points the log knows, so damage an operator finds is never
//! invisible to the service (review H1, issue 12).

use std::collections::{BTreeMap, BTreeSet};

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use vouch_events::{Event, SnapshotId, VerificationFailed, VerificationPassed, VerifyDepth};

use super::Ctx;
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};
use crate::validate::parse_depth;

/// Points in one report at most (the CLI sends larger runs in batches).
pub const MAX_REPORT_POINTS: usize = 500;
/// Damaged packs named in one report at most.
pub const MAX_REPORT_PACKS: usize = 10_000;
/// Damaged packs named for one point at most.
pub const MAX_POINT_PACKS: usize = 20;
/// Problems (text) named for one point at most.
pub const MAX_POINT_PROBLEMS: usize = 5;
/// Longest problem text, in bytes.
pub const MAX_PROBLEM_LEN: usize = 300;

/// One point's verdict.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PointReport {
    /// The point (snapshot) id: 64 lowercase hex digits.
    point: String,
    /// `passed` or `damaged`.
    verdict: String,
    /// How deep the CLI read: `structure`, `read-sample:N` (N in 1..=100)
    /// or `read-all`.
    depth: String,
    /// Damaged packs this point's trees reach (64 hex digits each; each
    /// also in the report's `damaged_packs`). Only with `damaged`.
    #[serde(default)]
    damaged_packs: Vec<String>,
    /// Other damage of this point, for humans (e.g. a path, an unreadable
    /// manifest). Only with `damaged`.
    #[serde(default)]
    problems: Vec<String>,
}

/// Body of `POST /api/v1/repositories/{id}/verify-reports`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyReportInput {
    /// Per point, its verdict (at most 500; points the log does not know
    /// are answered as `unknown`, and nothing is recorded for them).
    points: Vec<PointReport>,
    /// Every damaged pack the points name (64 hex digits each).
    #[serde(default)]
    damaged_packs: Vec<String>,
    /// Bytes the whole run read back.
    #[serde(default)]
    bytes_read: u64,
    /// Blobs the whole run checked.
    #[serde(default)]
    blobs_checked: u64,
}

/// One event recorded for a report.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecordedVerdict {
    /// The point.
    point: String,
    /// `verification.passed` or `verification.failed`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// Its sequence number in the log.
    seq: u64,
}

/// What was recorded.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VerifyReportAnswer {
    /// The repository.
    repository: String,
    /// One event per known, live point.
    recorded: Vec<RecordedVerdict>,
    /// Points the log does not know in this repository (nothing recorded).
    unknown: Vec<String>,
    /// Points already forgotten (nothing recorded).
    forgotten: Vec<String>,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A checked point verdict.
struct Verdict {
    point: SnapshotId,
    depth: VerifyDepth,
    /// Empty: passed.
    damaged: Option<Vec<String>>,
}

fn validate(input: VerifyReportInput) -> Result<(Vec<Verdict>, u64, u64), WebError> {
    let mut fields = BTreeMap::new();
    if input.points.is_empty() {
        fields.insert("points".to_owned(), "at least one point".to_owned());
    }
    if input.points.len() > MAX_REPORT_POINTS {
        fields.insert(
            "points".to_owned(),
            format!("at most {MAX_REPORT_POINTS} per report; send the rest in another"),
        );
    }
    if input.damaged_packs.len() > MAX_REPORT_PACKS {
        fields.insert(
            "damaged_packs".to_owned(),
            format!("at most {MAX_REPORT_PACKS}"),
        );
    }
    let mut packs = BTreeSet::new();
    for (i, p) in input.damaged_packs.iter().enumerate() {
        if !is_hex64(p) {
            fields.insert(
                format!("damaged_packs[{i}]"),
                "not 64 lowercase hex digits".to_owned(),
            );
        } else if !packs.insert(p.as_str()) {
            fields.insert(format!("damaged_packs[{i}]"), "named twice".to_owned());
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, p) in input.points.iter().enumerate().take(MAX_REPORT_POINTS) {
        let f = |name: &str| format!("points[{i}].{name}");
        let point = if is_hex64(&p.point) {
            p.point.parse::<SnapshotId>().ok()
        } else {
            None
        };
        let Some(point) = point else {
            fields.insert(f("point"), "not 64 lowercase hex digits".to_owned());
            continue;
        };
        if !seen.insert(point) {
            fields.insert(f("point"), "named twice".to_owned());
        }
        let depth = match parse_depth(&p.depth) {
            Ok(d) => d,
            Err(e) => {
                fields.insert(f("depth"), e);
                continue;
            }
        };
        if p.damaged_packs.len() > MAX_POINT_PACKS {
            fields.insert(f("damaged_packs"), format!("at most {MAX_POINT_PACKS}"));
        }
        for pk in &p.damaged_packs {
            if !packs.contains(pk.as_str()) {
                fields.insert(
                    f("damaged_packs"),
                    format!("{pk:?} is not in the report's damaged_packs"),
                );
            }
        }
        if p.problems.len() > MAX_POINT_PROBLEMS
            || p.problems.iter().any(|s| {
                s.is_empty() || s.len() > MAX_PROBLEM_LEN || s.chars().any(char::is_control)
            })
        {
            fields.insert(
                f("problems"),
                format!(
                    "at most {MAX_POINT_PROBLEMS}, each 1 to {MAX_PROBLEM_LEN} bytes of printable text"
                ),
            );
        }
        let damaged = match p.verdict.as_str() {
            "passed" => {
                if !p.damaged_packs.is_empty() || !p.problems.is_empty() {
                    fields.insert(
                        f("verdict"),
                        "a passed point names no damaged pack and no problem".to_owned(),
                    );
                }
                None
            }
            "damaged" => {
                if p.damaged_packs.is_empty() && p.problems.is_empty() {
                    fields.insert(
                        f("verdict"),
                        "a damaged point names at least one damaged pack or problem".to_owned(),
                    );
                }
                Some(
                    p.damaged_packs
                        .iter()
                        .map(|pk| format!("pack {pk}"))
                        .chain(p.problems.iter().cloned())
                        .collect(),
                )
            }
            other => {
                fields.insert(
                    f("verdict"),
                    format!("{other:?}: expected passed or damaged"),
                );
                None
            }
        };
        out.push(Verdict {
            point,
            depth,
            damaged,
        });
    }
    if !fields.is_empty() {
        return Err(WebError::Invalid {
            message: "the verify report does not validate".into(),
            fields,
        });
    }
    Ok((out, input.bytes_read, input.blobs_checked))
}

/// The `{id}` of a repository route, for the OpenAPI document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct RepositoryIdParam {
    /// The repository's id in this service (`default`, ...).
    id: String,
}

/// Records what a `vouch verify` run by hand found: one
/// `verification.passed` or `verification.failed` (job: none) per point of
/// this repository that the log knows and has not forgotten. Admin or
/// operator.
#[utoipa::path(post, path = "/api/v1/repositories/{id}/verify-reports", tag = "repositories",
    params(RepositoryIdParam), request_body = VerifyReportInput,
    responses((status = 200, body = VerifyReportAnswer), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 404, response = errors::NotFound),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 422, response = errors::Invalid), (status = 503, response = errors::Unavailable),
        (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn create(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
    body: web::Json<serde_json::Map<String, serde_json::Value>>,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    let input: VerifyReportInput = crate::validate::body(body.into_inner())?;
    let (verdicts, bytes_read, blobs_checked) = validate(input)?;
    let repository = id.into_inner();
    let handle = ctx.service()?;
    // The repository must be one this service serves.
    let browse = ctx.browse()?;
    let repos = web::block(move || browse.repositories())
        .await
        .map_err(|e| WebError::Internal(e.to_string()))??;
    if !repos.iter().any(|r| r.id == repository) {
        return Err(WebError::NotFound(format!(
            "this service serves no repository {repository:?}"
        )));
    }
    let ids: Vec<SnapshotId> = verdicts.iter().map(|v| v.point).collect();
    let repo = repository.clone();
    // Per point: None unknown (or of another repository), Some(true) live.
    let known: BTreeMap<SnapshotId, bool> = handle
        .query(0, move |p| {
            ids.iter()
                .filter_map(|id| {
                    p.points
                        .points
                        .get(id)
                        .filter(|pt| pt.repository.as_str() == repo)
                        .map(|pt| (*id, pt.expired.is_none()))
                })
                .collect()
        })
        .await?;
    let mut unknown = Vec::new();
    let mut forgotten = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    let mut recorded = Vec::new();
    for v in verdicts {
        match known.get(&v.point) {
            None => unknown.push(v.point.to_string()),
            Some(false) => forgotten.push(v.point.to_string()),
            Some(true) => {
                let kind = match v.damaged {
                    None => {
                        events.push(
                            VerificationPassed {
                                point: v.point,
                                job: None,
                                depth: v.depth,
                                bytes_read,
                                blobs_checked,
                            }
                            .into(),
                        );
                        "verification.passed"
                    }
                    Some(damaged) => {
                        events.push(
                            VerificationFailed {
                                point: v.point,
                                job: None,
                                depth: v.depth,
                                bytes_read,
                                damaged,
                            }
                            .into(),
                        );
                        "verification.failed"
                    }
                };
                recorded.push((v.point, kind));
            }
        }
    }
    let mut answer = VerifyReportAnswer {
        repository: repository.clone(),
        recorded: Vec::new(),
        unknown,
        forgotten,
    };
    if !events.is_empty() {
        let failed = recorded
            .iter()
            .filter(|(_, k)| *k == "verification.failed")
            .count();
        tracing::info!(
            repository = %repository,
            points = recorded.len(),
            failed,
            "recording a verify report of the CLI"
        );
        let receipt = handle.append(events).await?;
        answer.recorded = recorded
            .into_iter()
            .zip(receipt.first_seq..)
            .map(|((point, kind), seq)| RecordedVerdict {
                point: point.to_string(),
                kind,
                seq,
            })
            .collect();
    }
    Ok(HttpResponse::Ok().json(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(v: serde_json::Value) -> Result<(Vec<Verdict>, u64, u64), WebError> {
        validate(serde_json::from_value(v).expect("shape"))
    }

    const P: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
    const K: &str = "bb00000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn a_consistent_report_validates_and_carries_packs_into_damaged() {
        let (v, bytes, _) = input(serde_json::json!({
            "points": [{"point": P, "verdict": "damaged", "depth": "read-all",
                        "damaged_packs": [K], "problems": ["/a/b"]}],
            "damaged_packs": [K], "bytes_read": 7
        }))
        .expect("valid");
        assert_eq!(bytes, 7);
        assert_eq!(v[0].depth, VerifyDepth::ReadAll);
        assert_eq!(
            v[0].damaged.as_deref(),
            Some(&[format!("pack {K}"), "/a/b".to_owned()][..])
        );
    }

    #[test]
    fn inconsistent_or_unbounded_reports_are_refused_per_field() {
        let bad = [
            serde_json::json!({"points": []}),
            serde_json::json!({"points": [{"point": "AA", "verdict": "passed", "depth": "structure"}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "passed", "depth": "deep"}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "maybe", "depth": "structure"}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "damaged", "depth": "structure"}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "passed", "depth": "structure",
                                           "problems": ["x"]}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "damaged", "depth": "structure",
                                           "damaged_packs": [K]}]}),
            serde_json::json!({"points": [
                {"point": P, "verdict": "passed", "depth": "structure"},
                {"point": P, "verdict": "passed", "depth": "structure"}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "damaged", "depth": "structure",
                                           "problems": ["x".repeat(MAX_PROBLEM_LEN + 1)]}]}),
        ];
        for b in bad {
            assert!(
                matches!(input(b.clone()), Err(WebError::Invalid { .. })),
                "accepted {b}"
            );
        }
        let many: Vec<_> = (0..=MAX_REPORT_POINTS)
            .map(|i| serde_json::json!({"point": format!("{i:064x}"), "verdict": "passed", "depth": "structure"}))
            .collect();
        assert!(input(serde_json::json!({ "points": many })).is_err());
        assert!(
            serde_json::from_value::<VerifyReportInput>(
                serde_json::json!({"points": [], "extra": 1})
            )
            .is_err(),
            "unknown fields are refused"
        );
    }
}
