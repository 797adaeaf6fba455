//! Plan input: parsing and validation with an error per field.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;
use vouch_actors::Schedule;
use vouch_events::{
    KeepPolicy, PlanDefinition, RepositoryId, RestoreTestPolicy, VerificationPolicy, VerifyDepth,
};

use crate::error::WebError;
use crate::views::{depth_label, human, RetentionView};

/// Distinguishes a missing field (`None`) from an explicit `null`
/// (`Some(None)`).
fn double<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Verification policy input; a missing field takes its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct VerificationInput {
    /// Verify each point right after its backup.
    #[serde(default)]
    pub after_backup: Option<bool>,
    /// Re-verify this often (humantime; null: never).
    #[serde(default, deserialize_with = "double")]
    #[schema(value_type = Option<String>)]
    pub every: Option<Option<String>>,
    /// `structure`, `read-all` or `read-sample:N` (N in 1..=100).
    #[serde(default)]
    pub depth: Option<String>,
}

/// Restore-test policy input; a missing field takes its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RestoreTestInput {
    /// Restore-test this often (humantime; null: never).
    #[serde(default, deserialize_with = "double")]
    #[schema(value_type = Option<String>)]
    pub every: Option<Option<String>>,
    /// Evidence older than this no longer counts (humantime).
    #[serde(default)]
    pub max_evidence_age: Option<String>,
    /// Restore at most this many files (null: the whole tree).
    #[serde(default, deserialize_with = "double")]
    #[schema(value_type = Option<u64>)]
    pub sample_files: Option<Option<u64>>,
}

/// The input of `POST` and `PUT /api/v1/plans`: a plan without its derived
/// fields. Missing fields take the defaults of `GET /api/v1/plans/defaults`
/// (on `PUT`: `paused` keeps its current value). A given `retention` object
/// is taken as is (a missing rule is no rule).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PlanInput {
    /// `[a-z0-9][a-z0-9._-]{0,62}`; on `PUT`, if given, it must match the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// An absolute path, or `agent:<name>:<absolute path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// 5-field cron expression in UTC, or `@daily`-style nicknames.
    #[serde(default)]
    pub schedule: Option<String>,
    /// Recovery point objective (humantime, > 0).
    #[serde(default)]
    pub rpo: Option<String>,
    /// Target repository.
    #[serde(default)]
    pub repository: Option<String>,
    /// Paused.
    #[serde(default)]
    pub paused: Option<bool>,
    /// Keep rules.
    #[serde(default)]
    pub retention: Option<RetentionView>,
    /// Verification policy.
    #[serde(default)]
    pub verification: Option<VerificationInput>,
    /// Restore-test policy.
    #[serde(default)]
    pub restore_test: Option<RestoreTestInput>,
}

const DEFAULT_SCHEDULE: &str = "0 2 * * *";
const DEFAULT_RPO: Duration = Duration::from_secs(26 * 3600);
const DEFAULT_REPOSITORY: &str = "default";
const DAY: u64 = 86_400;

/// The defaults every missing field of a plan input takes.
pub(crate) fn default_definition() -> PlanDefinition {
    PlanDefinition {
        source: String::new(),
        schedule: DEFAULT_SCHEDULE.into(),
        retention: KeepPolicy {
            last: Some(7),
            daily: Some(7),
            weekly: Some(4),
            monthly: Some(6),
            ..KeepPolicy::default()
        },
        verification: VerificationPolicy {
            after_backup: true,
            every: Some(Duration::from_secs(7 * DAY)),
            depth: VerifyDepth::Structure,
        },
        restore_test: RestoreTestPolicy {
            every: Some(Duration::from_secs(DAY)),
            max_evidence_age: Duration::from_secs(7 * DAY),
            sample_files: Some(1000),
        },
        rpo: DEFAULT_RPO,
        repository: RepositoryId::new(DEFAULT_REPOSITORY),
        paused: false,
    }
}

/// `GET /api/v1/plans/defaults`: an input with every default filled in.
pub(crate) fn defaults_input() -> PlanInput {
    let d = default_definition();
    PlanInput {
        id: None,
        source: None,
        schedule: Some(d.schedule),
        rpo: Some(human(d.rpo)),
        repository: Some(d.repository.to_string()),
        paused: Some(false),
        retention: Some(RetentionView::of(&d.retention)),
        verification: Some(VerificationInput {
            after_backup: Some(d.verification.after_backup),
            every: Some(d.verification.every.map(human)),
            depth: Some(depth_label(d.verification.depth)),
        }),
        restore_test: Some(RestoreTestInput {
            every: Some(d.restore_test.every.map(human)),
            max_evidence_age: Some(human(d.restore_test.max_evidence_age)),
            sample_files: Some(d.restore_test.sample_files),
        }),
    }
}

/// Whether `id` is a valid plan id.
pub(crate) fn valid_plan_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

/// Parses a depth label.
pub(crate) fn parse_depth(s: &str) -> Result<VerifyDepth, String> {
    match s {
        "structure" => Ok(VerifyDepth::Structure),
        "read-all" => Ok(VerifyDepth::ReadAll),
        _ => {
            let n = s
                .strip_prefix("read-sample:")
                .ok_or_else(|| {
                    format!("{s:?}: expected structure, read-all or read-sample:N (N in 1..=100)")
                })?
                .parse::<u8>()
                .map_err(|_| format!("{s:?}: N of read-sample:N must be a number in 1..=100"))?;
            if (1..=100).contains(&n) {
                Ok(VerifyDepth::ReadSample(n))
            } else {
                Err(format!("{s:?}: N of read-sample:N must be in 1..=100"))
            }
        }
    }
}

fn duration(field: &str, s: &str, errors: &mut BTreeMap<String, String>) -> Option<Duration> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => {
            errors.insert(field.into(), format!("{s:?}: must be more than zero"));
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            errors.insert(
                field.into(),
                format!("{s:?} is not a duration like \"26h\" or \"7days\": {e}"),
            );
            None
        }
    }
}

fn source_ok(source: &str) -> Result<(), String> {
    let path = match source.strip_prefix("agent:") {
        Some(rest) => {
            let (name, path) = rest
                .split_once(':')
                .ok_or("expected agent:<name>:<absolute path>")?;
            if name.is_empty() {
                return Err("the agent name of agent:<name>:<path> is empty".into());
            }
            path
        }
        None => source,
    };
    if !path.starts_with('/') {
        return Err(format!("{source:?}: the source must be an absolute path"));
    }
    if path.contains('\0') {
        return Err("the source must not contain NUL".into());
    }
    Ok(())
}

/// Builds a definition from `input` over `base` (defaults for `POST`, the
/// current definition for `PUT`), or 422 with every field that is wrong.
/// `path_id` is the id from the URL (`PUT`).
pub(crate) fn definition(
    input: PlanInput,
    base: PlanDefinition,
    path_id: Option<&str>,
) -> Result<(String, PlanDefinition), WebError> {
    let mut errors = BTreeMap::new();
    let defaults = default_definition();
    let id = match (path_id, input.id) {
        (Some(p), Some(b)) if p != b => {
            errors.insert("id".into(), format!("{b:?} differs from the path's {p:?}"));
            p.to_owned()
        }
        (Some(p), _) => p.to_owned(),
        (None, Some(b)) => b,
        (None, None) => {
            errors.insert("id".into(), "required".into());
            String::new()
        }
    };
    if !id.is_empty() && !valid_plan_id(&id) {
        errors.insert(
            "id".into(),
            format!("{id:?} must match [a-z0-9][a-z0-9._-]{{0,62}}"),
        );
    }
    let mut def = base;
    match input.source {
        Some(s) => {
            if let Err(e) = source_ok(&s) {
                errors.insert("source".into(), e);
            }
            def.source = s;
        }
        None if def.source.is_empty() => {
            errors.insert("source".into(), "required".into());
        }
        None => {}
    }
    if let Some(s) = input.schedule {
        if let Err(e) = Schedule::parse(&s) {
            errors.insert("schedule".into(), e.to_string());
        }
        def.schedule = s;
    }
    if let Some(r) = input.rpo {
        if let Some(d) = duration("rpo", &r, &mut errors) {
            def.rpo = d;
        }
    }
    if let Some(r) = input.repository {
        if r.is_empty() {
            errors.insert("repository".into(), "must not be empty".into());
        }
        def.repository = RepositoryId::new(r);
    }
    if let Some(p) = input.paused {
        def.paused = p;
    }
    if let Some(r) = input.retention {
        let within = match &r.within {
            Some(w) => duration("retention.within", w, &mut errors),
            None => None,
        };
        def.retention = KeepPolicy {
            last: r.last,
            hourly: r.hourly,
            daily: r.daily,
            weekly: r.weekly,
            monthly: r.monthly,
            yearly: r.yearly,
            within,
            tags: r.tags,
        };
    }
    if let Some(v) = input.verification {
        let mut pol = defaults.verification.clone();
        if let Some(a) = v.after_backup {
            pol.after_backup = a;
        }
        match v.every {
            Some(Some(e)) => pol.every = duration("verification.every", &e, &mut errors),
            Some(None) => pol.every = None,
            None => {}
        }
        if let Some(d) = v.depth {
            match parse_depth(&d) {
                Ok(d) => pol.depth = d,
                Err(e) => {
                    errors.insert("verification.depth".into(), e);
                }
            }
        }
        def.verification = pol;
    }
    if let Some(r) = input.restore_test {
        let mut pol = defaults.restore_test.clone();
        match r.every {
            Some(Some(e)) => pol.every = duration("restore_test.every", &e, &mut errors),
            Some(None) => pol.every = None,
            None => {}
        }
        if let Some(m) = r.max_evidence_age {
            if let Some(d) = duration("restore_test.max_evidence_age", &m, &mut errors) {
                pol.max_evidence_age = d;
            }
        }
        match r.sample_files {
            Some(Some(0)) => {
                errors.insert(
                    "restore_test.sample_files".into(),
                    "must be at least 1 (null: the whole tree)".into(),
                );
            }
            Some(n) => pol.sample_files = n,
            None => {}
        }
        def.restore_test = pol;
    }
    if errors.is_empty() {
        Ok((id, def))
    } else {
        Err(WebError::Invalid {
            message: format!(
                "the plan does not validate: {}",
                errors.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            fields: errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_labels_round_trip_and_bounds_hold() {
        for d in [
            VerifyDepth::Structure,
            VerifyDepth::ReadAll,
            VerifyDepth::ReadSample(1),
            VerifyDepth::ReadSample(100),
        ] {
            assert_eq!(parse_depth(&depth_label(d)), Ok(d));
        }
        assert!(parse_depth("read-sample:0").is_err());
        assert!(parse_depth("read-sample:101").is_err());
        assert!(parse_depth("deep").is_err());
    }

    #[test]
    fn plan_ids() {
        assert!(valid_plan_id("home"));
        assert!(valid_plan_id("0a.b_c-d"));
        assert!(!valid_plan_id("Home"));
        assert!(!valid_plan_id("-x"));
        assert!(!valid_plan_id(""));
        assert!(!valid_plan_id(&"a".repeat(64)));
    }

    #[test]
    fn every_bad_field_is_named() {
        let input: PlanInput = serde_json::from_value(serde_json::json!({
            "id": "Bad Id", "source": "relative/path", "schedule": "every day",
            "rpo": "0s", "verification": {"depth": "read-sample:0"},
            "restore_test": {"max_evidence_age": "soon"}
        }))
        .unwrap_or_default();
        let Err(WebError::Invalid { fields, .. }) = definition(input, default_definition(), None)
        else {
            panic!("expected invalid");
        };
        let keys: Vec<_> = fields.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "restore_test.max_evidence_age",
                "rpo",
                "schedule",
                "source",
                "verification.depth"
            ]
        );
    }
}
