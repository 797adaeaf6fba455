//! `POST /api/v1/repositories/{id}/verify-reports`: what a `vouch verify`
//! run by hand (the CLI) found in a repository this service owns, recorded
//! in the log as `verification.passed` / `verification.failed` (job: none)
//! for the points the log knows, so damage an operator finds is never
//! invisible to the service (review H1, issue 12).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::PoisonError;

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, AnyOfBuilder, ArrayBuilder, Object, ObjectBuilder,
    OneOfBuilder, Schema, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::ToSchema;
use vouch_events::{
    Event, Projections, SnapshotId, VerificationFailed, VerificationPassed, VerifyDepth,
};

use super::{grammar, Ctx};
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
/// Longest problem text, in characters (Unicode scalar values, as JSON
/// Schema's `maxLength` counts).
pub const MAX_PROBLEM_LEN: usize = 300;
/// The largest `bytes_read` / `blobs_checked`.
pub const MAX_COUNTER: u64 = i64::MAX as u64;

/// A problem text: 1 to [`MAX_PROBLEM_LEN`] characters, none of them a
/// control character (Unicode `Cc`: U+0000-U+001F, U+007F-U+009F).
pub(crate) const PROBLEM_PATTERN: &str = "^[^\\x00-\\x1f\\x7f-\\x9f]+$";

/// One point's verdict. Its schema ([`point_report_schema`]) is written by
/// hand: `verdict` decides which of `damaged_packs` and `problems` may be
/// there, which the derive cannot say.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PointReport {
    point: String,
    verdict: String,
    depth: String,
    #[serde(default)]
    damaged_packs: Vec<String>,
    #[serde(default)]
    problems: Vec<String>,
}

fn hex64_schema(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .pattern(Some(grammar::POINT_ID_PATTERN))
}

fn packs_schema(description: &str, max: usize, unique: bool) -> ArrayBuilder {
    ArrayBuilder::new()
        .description(Some(description))
        .items(hex64_schema("A pack id: 64 lowercase hex digits."))
        .max_items(Some(max))
        .unique_items(unique)
}

fn problems_schema() -> ArrayBuilder {
    ArrayBuilder::new()
        .description(Some(
            "Other damage of this point, for humans (a path, an unreadable manifest). \
             Only with `damaged`.",
        ))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(MAX_PROBLEM_LEN))
                .pattern(Some(PROBLEM_PATTERN)),
        )
        .max_items(Some(MAX_POINT_PROBLEMS))
}

/// The schema of [`PointReport`]: the fields, then one of two shapes by
/// verdict: `passed` names no damaged pack and no problem; `damaged` names
/// at least one of either.
fn point_report_schema() -> Schema {
    let fields = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "point",
            hex64_schema("The point (snapshot) id: 64 lowercase hex digits."),
        )
        .required("point")
        .property(
            "verdict",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(
                    "`passed`: the run found nothing wrong with this point; \
                     `damaged`: it found damage (named in `damaged_packs` and `problems`).",
                ))
                .enum_values(Some(["passed", "damaged"])),
        )
        .required("verdict")
        .property(
            "depth",
            grammar::pattern_schema(
                "How deep the CLI read: `structure`, `read-sample:N` (N in 1..=100) or \
                 `read-all`.",
                grammar::DEPTH_PATTERN,
                None,
                false,
            ),
        )
        .required("depth")
        .property(
            "damaged_packs",
            packs_schema(
                "Damaged packs this point's trees reach. Only with `damaged`.",
                MAX_POINT_PACKS,
                false,
            ),
        )
        .property("problems", problems_schema())
        .additional_properties(Some(AdditionalProperties::<Schema>::FreeForm(false)));
    let verdict_is = |v: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some([v.to_owned()]))
    };
    let empty = || ArrayBuilder::new().max_items(Some(0));
    let passed = ObjectBuilder::new()
        .schema_type(Type::Object)
        .title(Some("passed"))
        .property("verdict", verdict_is("passed"))
        .property("damaged_packs", empty())
        .property("problems", empty());
    let non_empty = |field: &str| {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(field, ArrayBuilder::new().min_items(Some(1)))
            .required(field)
    };
    let damaged = AllOfBuilder::new()
        .title(Some("damaged"))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property("verdict", verdict_is("damaged")),
        )
        .item(
            AnyOfBuilder::new()
                .item(non_empty("damaged_packs"))
                .item(non_empty("problems")),
        );
    AllOfBuilder::new()
        .description(Some(
            "One point's verdict. A `passed` point names no damaged pack and no problem; a \
             `damaged` one names at least one of either.",
        ))
        .item(fields)
        .item(OneOfBuilder::new().item(passed).item(damaged))
        .into()
}

impl utoipa::PartialSchema for PointReport {
    fn schema() -> RefOr<Schema> {
        RefOr::T(point_report_schema())
    }
}

impl utoipa::ToSchema for PointReport {}

/// `bytes_read` / `blobs_checked`: a whole number in `0..=MAX_COUNTER`;
/// an integral float (`7.0`) too, as JSON Schema counts it an integer.
fn counter<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    let n = serde_json::Number::deserialize(d)?;
    n.as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= MAX_COUNTER as f64)
                .map(|f| f as u64)
        })
        .filter(|v| *v <= MAX_COUNTER)
        .ok_or_else(|| D::Error::custom(format!("{n} is not a whole number in 0..={MAX_COUNTER}")))
}

fn bytes_read_schema() -> Object {
    grammar::integer_schema("Bytes the whole run read back.", 0, MAX_COUNTER, false)
}

fn blobs_checked_schema() -> Object {
    grammar::integer_schema("Blobs the whole run checked.", 0, MAX_COUNTER, false)
}

fn points_schema() -> ArrayBuilder {
    ArrayBuilder::new()
        .description(Some(
            "Per point, its verdict (1 to 500; points the log does not know are answered \
             as `unknown`, and nothing is recorded for them). A point named more than once \
             counts once: damaged if any of its entries is (their damage together, at the \
             deepest depth among them), else passed at the shallowest depth named.",
        ))
        .items(RefOr::<Schema>::Ref(Ref::from_schema_name("PointReport")))
        .min_items(Some(1))
        .max_items(Some(MAX_REPORT_POINTS))
}

fn report_packs_schema() -> ArrayBuilder {
    packs_schema(
        "Every damaged pack the run found, each once (those no listed point reaches \
         included). For the record of the run; each point's events name its own packs.",
        MAX_REPORT_PACKS,
        true,
    )
}

/// Body of `POST /api/v1/repositories/{id}/verify-reports`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyReportInput {
    #[schema(schema_with = points_schema)]
    points: Vec<PointReport>,
    #[serde(default)]
    #[schema(schema_with = report_packs_schema)]
    damaged_packs: Vec<String>,
    #[serde(default, deserialize_with = "counter")]
    #[schema(schema_with = bytes_read_schema)]
    bytes_read: u64,
    #[serde(default, deserialize_with = "counter")]
    #[schema(schema_with = blobs_checked_schema)]
    blobs_checked: u64,
}

/// One event recorded for a report.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecordedVerdict {
    /// The point.
    point: String,
    /// `verification.passed` or `verification.failed`.
    #[serde(rename = "type")]
    #[schema(schema_with = recorded_kind_schema)]
    kind: &'static str,
    /// Its sequence number in the log.
    seq: u64,
}

fn recorded_kind_schema() -> Object {
    grammar::enum_schema(
        "`verification.passed` or `verification.failed`.",
        &["verification.passed", "verification.failed"],
    )
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

/// Whether `s` is a problem text the schema allows.
fn is_problem(s: &str) -> bool {
    let n = s.chars().count();
    (1..=MAX_PROBLEM_LEN).contains(&n) && !s.chars().any(char::is_control)
}

/// A checked point verdict.
#[derive(Clone)]
struct Verdict {
    point: SnapshotId,
    depth: VerifyDepth,
    /// None: passed; Some: what is damaged.
    damaged: Option<Vec<String>>,
}

/// Folds the entries of one point named more than once into one verdict:
/// damaged if any is (damage in order, the deepest depth of the damaged
/// ones), else passed at the shallowest depth named. Never stronger than
/// its weakest entry.
fn merge(into: &mut Verdict, v: Verdict) {
    match (&mut into.damaged, v.damaged) {
        (None, None) => {
            if !v.depth.covers(&into.depth) {
                into.depth = v.depth;
            }
        }
        (None, Some(d)) => {
            into.damaged = Some(d);
            into.depth = v.depth;
        }
        (Some(_), None) => {}
        (Some(mine), Some(d)) => {
            mine.extend(d);
            if !into.depth.covers(&v.depth) {
                into.depth = v.depth;
            }
        }
    }
}

/// A body read and checked as [`create`] does, for the fuzz harness.
#[cfg(feature = "fuzzing")]
pub(crate) fn check_body(body: serde_json::Map<String, serde_json::Value>) {
    if let Ok(input) = crate::validate::body::<VerifyReportInput>(body) {
        let _ = validate(input);
    }
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
    // Per point, its index in `out` (a point named twice is merged).
    let mut seen: BTreeMap<SnapshotId, usize> = BTreeMap::new();
    let mut out: Vec<Verdict> = Vec::new();
    for (i, p) in input.points.into_iter().enumerate().take(MAX_REPORT_POINTS) {
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
        if let Some(pk) = p.damaged_packs.iter().find(|pk| !is_hex64(pk)) {
            fields.insert(
                f("damaged_packs"),
                format!("{pk:?} is not 64 lowercase hex digits"),
            );
        }
        if p.problems.len() > MAX_POINT_PROBLEMS || !p.problems.iter().all(|s| is_problem(s)) {
            fields.insert(
                f("problems"),
                format!(
                    "at most {MAX_POINT_PROBLEMS}, each 1 to {MAX_PROBLEM_LEN} characters, \
                     none a control character"
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
                        .chain(p.problems)
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
        let v = Verdict {
            point,
            depth,
            damaged,
        };
        match seen.get(&point).and_then(|&at| out.get_mut(at)) {
            Some(into) => merge(into, v),
            None => {
                seen.insert(point, out.len());
                out.push(v);
            }
        }
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
    #[param(example = "default")]
    id: String,
}

/// Records what a `vouch verify` run by hand found: one
/// `verification.passed` or `verification.failed` (job: none) per point of
/// this repository that the log knows and has not forgotten. Admin or
/// operator.
#[utoipa::path(post, path = "/api/v1/repositories/{id}/verify-reports", operation_id = "create_verify_report", tag = "repositories",
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
    // Decided and appended with nothing in between (L7): a point forgotten
    // while the report was being decided is answered `forgotten`, never
    // given a verdict after it was forgotten.
    let decided = std::sync::Arc::new(std::sync::Mutex::new(None::<Decision>));
    let slot = decided.clone();
    let repo = repository.clone();
    let audit = super::audited(&who, "verify.report", &repository);
    let appended = handle
        .append_decided(move |p| {
            let d = decide(p, &repo, &verdicts, bytes_read, blobs_checked);
            let mut events = d.events.clone();
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(d);
            if events.is_empty() {
                // Nothing to record: answered from the decision alone.
                return Err(());
            }
            // Last, so the verdicts keep the seqs `recorded` gives them.
            events.push(audit.clone());
            Ok(events)
        })
        .await?;
    let Some(d) = decided
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        return Err(WebError::Internal(
            "the verify report was never decided".into(),
        ));
    };
    let mut answer = VerifyReportAnswer {
        repository: repository.clone(),
        recorded: Vec::new(),
        unknown: d.unknown,
        forgotten: d.forgotten,
    };
    if let Ok(receipt) = appended {
        let failed = d
            .recorded
            .iter()
            .filter(|(_, k)| *k == "verification.failed")
            .count();
        tracing::info!(
            repository = %repository,
            points = d.recorded.len(),
            failed,
            "recorded a verify report of the CLI"
        );
        answer.recorded = d
            .recorded
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

/// What a report records, decided on one state of the log.
#[derive(Debug)]
struct Decision {
    events: Vec<Event>,
    /// Per event, its point and type.
    recorded: Vec<(SnapshotId, &'static str)>,
    unknown: Vec<String>,
    forgotten: Vec<String>,
}

/// One event per verdict on a point of `repository` the log knows and has
/// not forgotten; the others are named `unknown` or `forgotten`.
fn decide(
    p: &Projections,
    repository: &str,
    verdicts: &[Verdict],
    bytes_read: u64,
    blobs_checked: u64,
) -> Decision {
    let mut d = Decision {
        events: Vec::new(),
        recorded: Vec::new(),
        unknown: Vec::new(),
        forgotten: Vec::new(),
    };
    for v in verdicts {
        let known = p
            .points
            .points
            .get(&v.point)
            .filter(|pt| pt.repository.as_str() == repository);
        match known {
            None => d.unknown.push(v.point.to_string()),
            Some(pt) if pt.expired.is_some() => d.forgotten.push(v.point.to_string()),
            Some(_) => {
                let kind = match &v.damaged {
                    None => {
                        d.events.push(
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
                        d.events.push(
                            VerificationFailed {
                                point: v.point,
                                job: None,
                                depth: v.depth,
                                bytes_read,
                                damaged: damaged.clone(),
                            }
                            .into(),
                        );
                        "verification.failed"
                    }
                };
                d.recorded.push((v.point, kind));
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(v: serde_json::Value) -> Result<(Vec<Verdict>, u64, u64), WebError> {
        validate(serde_json::from_value(v).expect("shape"))
    }

    /// Found by schemathesis (seed 1): an integral float above 2^52 in
    /// the body, `3651944619502862.0`, was read as `...862.5` (serde_json's
    /// fast float parser is not correctly rounded) and refused as no whole
    /// number. The body is parsed correctly rounded now.
    #[test]
    fn a_large_integral_float_in_the_body_is_read_exactly() {
        let body = format!(
            r#"{{"points": [{{"point": "{P}", "verdict": "passed", "depth": "structure"}}], "bytes_read": 3651944619502862.0}}"#
        );
        let parsed: VerifyReportInput = serde_json::from_str(&body).expect("a whole number");
        assert_eq!(parsed.bytes_read, 3_651_944_619_502_862);
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
                                           "damaged_packs": ["KK"]}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "passed", "depth": "structure"}],
                               "damaged_packs": [K, K]}),
            serde_json::json!({"points": [{"point": P, "verdict": "damaged", "depth": "structure",
                                           "problems": ["x".repeat(MAX_PROBLEM_LEN + 1)]}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "damaged", "depth": "structure",
                                           "problems": ["a\nb"]}]}),
            serde_json::json!({"points": [{"point": P, "verdict": "damaged", "depth": "structure",
                                           "problems": [""]}]}),
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

    #[test]
    fn what_the_schema_allows_validates() {
        // A pack a point names need not be in the report's list (JSON
        // Schema cannot say so, so the server does not ask it).
        assert!(input(
            serde_json::json!({"points": [{"point": P, "verdict": "damaged",
            "depth": "structure", "damaged_packs": [K]}]})
        )
        .is_ok());
        // Length is in characters, as `maxLength` counts: 300 three-byte
        // characters are 900 bytes.
        assert!(input(
            serde_json::json!({"points": [{"point": P, "verdict": "damaged",
            "depth": "structure", "problems": ["\u{20ac}".repeat(MAX_PROBLEM_LEN)]}]})
        )
        .is_ok());
        // Integral floats are integers in JSON Schema.
        let (_, bytes, blobs) = input(serde_json::json!({"points": [{"point": P,
            "verdict": "passed", "depth": "structure"}], "bytes_read": 7.0, "blobs_checked": 0.0}))
        .expect("integral floats");
        assert_eq!((bytes, blobs), (7, 0));
        for n in [
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!(null),
            serde_json::json!(9.3e18),
            serde_json::json!(u64::MAX),
        ] {
            assert!(
                serde_json::from_value::<VerifyReportInput>(serde_json::json!({"points": [],
                    "bytes_read": n}))
                .is_err(),
                "bytes_read {n} accepted"
            );
        }
    }

    #[test]
    fn a_point_named_twice_counts_once_and_never_stronger_than_its_weakest_entry() {
        let (v, _, _) = input(serde_json::json!({"points": [
            {"point": P, "verdict": "passed", "depth": "read-all"},
            {"point": P, "verdict": "passed", "depth": "read-sample:5"},
            {"point": K, "verdict": "damaged", "depth": "structure", "problems": ["a"]},
            {"point": K, "verdict": "passed", "depth": "read-all"},
            {"point": K, "verdict": "damaged", "depth": "read-all", "problems": ["b"]},
        ]}))
        .expect("valid");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].point.to_string(), P);
        assert!(v[0].damaged.is_none());
        assert_eq!(v[0].depth, VerifyDepth::ReadSample(5));
        assert_eq!(v[1].point.to_string(), K);
        assert_eq!(
            v[1].damaged.as_deref(),
            Some(&["a".to_owned(), "b".to_owned()][..])
        );
        assert_eq!(v[1].depth, VerifyDepth::ReadAll);
    }

    #[test]
    fn the_schema_says_a_passed_point_names_no_damage() {
        let doc: serde_json::Value =
            serde_json::from_str(&crate::openapi_json_text()).unwrap_or_default();
        let schema = &doc["components"]["schemas"]["PointReport"];
        let fields = &schema["allOf"][0];
        assert_eq!(fields["additionalProperties"], false);
        assert_eq!(
            fields["properties"]["point"]["pattern"],
            grammar::POINT_ID_PATTERN
        );
        assert_eq!(
            fields["properties"]["verdict"]["enum"],
            serde_json::json!(["passed", "damaged"])
        );
        assert_eq!(
            fields["properties"]["depth"]["pattern"],
            grammar::DEPTH_PATTERN
        );
        let branches = &schema["allOf"][1]["oneOf"];
        assert_eq!(
            branches[0]["properties"]["verdict"]["enum"],
            serde_json::json!(["passed"])
        );
        assert_eq!(branches[0]["properties"]["damaged_packs"]["maxItems"], 0);
        assert_eq!(branches[0]["properties"]["problems"]["maxItems"], 0);
        let input = &doc["components"]["schemas"]["VerifyReportInput"]["properties"];
        assert_eq!(input["points"]["maxItems"], MAX_REPORT_POINTS);
        assert_eq!(input["damaged_packs"]["uniqueItems"], true);
        assert_eq!(input["bytes_read"]["type"], "integer");
        assert_eq!(input["bytes_read"]["minimum"], 0);
    }
}
