//! Plan input: parsing and validation with an error per field.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;
use vouch_actors::Schedule;
use vouch_events::{
    BootCheck, DumpMode, KeepPolicy, PlanDefinition, ProxmoxPolicy, ReplicaPolicy,
    ReplicaRequirement, RepositoryId, RestoreTestPolicy, VerificationPolicy, VerifyDepth,
};

use crate::api::grammar;
use crate::error::WebError;
use crate::plan_files::{FilesInput, HooksInput};
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

/// An object field, or null. serde would also take a JSON array for a
/// struct (its fields in order); the schema says object, so only an object
/// is taken.
pub(crate) fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Option::<serde_json::Map<String, serde_json::Value>>::deserialize(d)? {
        None => Ok(None),
        Some(m) => serde_json::from_value(serde_json::Value::Object(m))
            .map(Some)
            .map_err(D::Error::custom),
    }
}

/// Reads a JSON body that must be an object (see [`object`]) as `T`; 400
/// when it does not fit.
pub(crate) fn body<T: serde::de::DeserializeOwned>(
    body: serde_json::Map<String, serde_json::Value>,
) -> Result<T, WebError> {
    serde_json::from_value(serde_json::Value::Object(body)).map_err(|e| {
        WebError::BadRequest(format!("the body is not valid JSON for this route: {e}"))
    })
}

/// A whole number in `min..=max`, or null. JSON Schema counts `7.0` as an
/// integer, so an integral float is taken too.
pub(crate) fn whole<'de, D: Deserializer<'de>>(
    d: D,
    min: u64,
    max: u64,
) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let v = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= max as f64)
            .map(|f| f as u64)
    });
    match v {
        Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
        _ => Err(D::Error::custom(format!(
            "{n} is not a whole number in {min}..={max}"
        ))),
    }
}

/// A whole number (an integral float too, as JSON Schema allows) up to
/// 2^53 - 1; null or absent is 0.
pub(crate) fn whole_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(whole(d, 0, (1 << 53) - 1)?.unwrap_or(0))
}

/// A whole number (an integral float too, as JSON Schema allows) in the
/// range of `i32`, or null.
pub(crate) fn whole_i32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    use serde::de::Error;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let v = n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() <= f64::from(i32::MAX) + 1.0)
            .map(|f| f as i64)
    });
    v.and_then(|v| i32::try_from(v).ok())
        .map(Some)
        .ok_or_else(|| D::Error::custom(format!("{n} is not a whole number in the range of i32")))
}

/// The largest count of a retention rule.
const MAX_COUNT: u64 = u32::MAX as u64;
/// The largest `sample_files`.
const MAX_SAMPLE_FILES: u64 = 1_000_000_000;

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(whole(d, 0, MAX_COUNT)?.and_then(|v| u32::try_from(v).ok()))
}

fn sample_files<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    whole(d, 1, MAX_SAMPLE_FILES).map(Some)
}

fn count_schema() -> utoipa::openapi::Object {
    grammar::integer_schema(
        "Keep the newest point of each of the last N periods of this rule \
         (`last`: the N newest points); null: no such rule.",
        0,
        MAX_COUNT,
        true,
    )
}

fn within_schema() -> utoipa::openapi::Object {
    grammar::duration_schema(
        "Keep every point within this duration of the newest; null: no such rule.",
        true,
    )
}

fn sample_files_schema() -> utoipa::openapi::Object {
    grammar::integer_schema(
        "Restore at most this many files; null: the whole tree.",
        1,
        MAX_SAMPLE_FILES,
        true,
    )
}

fn every_verify_schema() -> utoipa::openapi::Object {
    grammar::duration_schema("Re-verify this often; null: never.", true)
}

fn every_restore_schema() -> utoipa::openapi::Object {
    grammar::duration_schema("Restore-test this often; null: never.", true)
}

fn full_every_schema() -> utoipa::openapi::Object {
    grammar::duration_schema(
        "The proof policy: a complete restore test (every file) at least this often; \
         null: sampled tests suffice.",
        true,
    )
}

fn max_evidence_age_schema() -> utoipa::openapi::Object {
    grammar::duration_schema("Evidence older than this no longer counts.", true)
}

fn depth_schema() -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "`structure`, `read-all` or `read-sample:N` (N in 1..=100).",
        grammar::DEPTH_PATTERN,
        None,
        true,
    )
}

fn source_schema(nullable: bool) -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "An absolute path, `agent:<agent name>:<absolute path>` for a plan an agent backs up \
         (the agent name is its token's name, 1-64 of `A-Z a-z 0-9 . _ -`), or \
         `vzdump:<absolute path>` for Proxmox VE guests from their vzdump archives (one \
         archive, or a dump directory's newest archive of each guest), or \
         `pve:<cluster>/qemu/<vmid>` / `pve:<cluster>/lxc/<vmid>` for a guest a configured \
         Proxmox VE cluster dumps through its API.",
        grammar::SOURCE_PATTERN,
        Some(grammar::SOURCE_MAX_LEN),
        nullable,
    )
}

fn source_schema_nullable() -> utoipa::openapi::Object {
    source_schema(true)
}

fn schedule_schema() -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "When the plan runs, in UTC: five fields `minute hour day-of-month month day-of-week` \
         separated by one space (0-59, 0-23, 1-31, 1-12, 0-7 with 0 and 7 Sunday), each `*`, \
         `*/step` or a list of `n`, `a-b` or `a-b/step` (`a <= b`, step 1-99); or one of \
         `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`, `@annually`.",
        &grammar::schedule_pattern(),
        Some(grammar::SCHEDULE_MAX_LEN),
        true,
    )
}

fn rpo_schema() -> utoipa::openapi::Object {
    grammar::duration_schema(
        "Recovery point objective: the plan is at risk when its newest recoverable point is older.",
        true,
    )
}

/// Keep rules. A point is kept if any rule keeps it; no rule keeps all.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RetentionInput {
    /// Keep the N newest points.
    #[serde(default, deserialize_with = "count")]
    #[schema(schema_with = count_schema)]
    pub last: Option<u32>,
    /// ... of each of the last N hours that have one.
    #[serde(default, deserialize_with = "count")]
    #[schema(schema_with = count_schema)]
    pub hourly: Option<u32>,
    /// ... of each of the last N days that have one.
    #[serde(default, deserialize_with = "count")]
    #[schema(schema_with = count_schema)]
    pub daily: Option<u32>,
    /// ... of each of the last N ISO weeks that have one.
    #[serde(default, deserialize_with = "count")]
    #[schema(schema_with = count_schema)]
    pub weekly: Option<u32>,
    /// ... of each of the last N months that have one.
    #[serde(default, deserialize_with = "count")]
    #[schema(schema_with = count_schema)]
    pub monthly: Option<u32>,
    /// ... of each of the last N years that have one.
    #[serde(default, deserialize_with = "count")]
    #[schema(schema_with = count_schema)]
    pub yearly: Option<u32>,
    /// Keep every point within this duration of the newest.
    #[serde(default)]
    #[schema(schema_with = within_schema)]
    pub within: Option<String>,
    /// Keep every point carrying one of these tags (null: none).
    #[serde(default)]
    pub tags: Option<Vec<String>>,
}

impl RetentionInput {
    fn of(k: &KeepPolicy) -> Self {
        let v = RetentionView::of(k);
        RetentionInput {
            last: v.last,
            hourly: v.hourly,
            daily: v.daily,
            weekly: v.weekly,
            monthly: v.monthly,
            yearly: v.yearly,
            within: v.within,
            tags: Some(v.tags),
        }
    }
}

/// Verification policy input; a missing field takes its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct VerificationInput {
    /// Verify each point right after its backup.
    #[serde(default)]
    pub after_backup: Option<bool>,
    /// Re-verify this often (null: never).
    #[serde(default, deserialize_with = "double")]
    #[schema(schema_with = every_verify_schema)]
    pub every: Option<Option<String>>,
    /// `structure`, `read-all` or `read-sample:N` (N in 1..=100).
    #[serde(default)]
    #[schema(schema_with = depth_schema)]
    pub depth: Option<String>,
}

/// Restore-test policy input; a missing field takes its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RestoreTestInput {
    /// Restore-test this often (null: never).
    #[serde(default, deserialize_with = "double")]
    #[schema(schema_with = every_restore_schema)]
    pub every: Option<Option<String>>,
    /// Evidence older than this no longer counts.
    #[serde(default)]
    #[schema(schema_with = max_evidence_age_schema)]
    pub max_evidence_age: Option<String>,
    /// Restore at most this many files (null: the whole tree).
    #[serde(default, deserialize_with = "sample_files")]
    #[schema(schema_with = sample_files_schema)]
    pub sample_files: Option<Option<u64>>,
    /// A complete restore test at least this often (null: samples suffice).
    #[serde(default, deserialize_with = "double")]
    #[schema(schema_with = full_every_schema)]
    pub full_every: Option<Option<String>>,
    /// Boot a VM point's restored disk and wait for its console to show a
    /// marker (null or missing: no boot).
    #[serde(default, deserialize_with = "object")]
    #[schema(nullable)]
    pub boot: Option<BootInput>,
}

/// A restore test that boots the restored VM under qemu (no network) and
/// waits for a text on its serial console.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct BootInput {
    /// The text the console must show, compared literally (null or
    /// missing: `login:`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, nullable)]
    pub marker: Option<String>,
    /// How long the guest gets to show it (null or missing: 5m).
    #[serde(default)]
    #[schema(schema_with = boot_timeout_schema)]
    pub timeout: Option<String>,
    /// The guest's memory in MiB (null or missing: 1024).
    #[serde(default, deserialize_with = "memory_mib")]
    #[schema(schema_with = memory_mib_schema)]
    pub memory_mib: Option<u64>,
}

fn boot_timeout_schema() -> utoipa::openapi::Object {
    grammar::duration_schema("How long the booted guest gets to show its marker.", true)
}

/// The memory bounds of a booted guest, in MiB.
const MEMORY_MIB: (u64, u64) = (64, 65_536);

fn memory_mib<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole(d, MEMORY_MIB.0, MEMORY_MIB.1)
}

fn memory_mib_schema() -> utoipa::openapi::Object {
    grammar::integer_schema(
        "The booted guest's memory in MiB.",
        MEMORY_MIB.0,
        MEMORY_MIB.1,
        true,
    )
}

/// How a `pve:` source's guest is dumped.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ProxmoxInput {
    /// vzdump's mode (default `snapshot`).
    #[serde(default)]
    #[schema(schema_with = dump_mode_schema)]
    pub mode: Option<String>,
    /// Remove the archive from the dump storage once its snapshot is
    /// committed (default false).
    #[serde(default)]
    pub remove_dump: Option<bool>,
}

/// The names of [`DumpMode`]s in the API.
pub(crate) const DUMP_MODES: [&str; 3] = ["snapshot", "suspend", "stop"];

fn dump_mode_schema() -> utoipa::openapi::Object {
    grammar::nullable_enum_schema(
        "vzdump's mode: `snapshot` (live; also null or missing), `suspend` or `stop`.",
        &DUMP_MODES,
    )
}

fn lock_for_schema() -> utoipa::openapi::Object {
    grammar::duration_schema(
        "Each copy is locked against deletion for this long after it is made; \
         null: it keeps only its source point's lock.",
        true,
    )
}

fn anomaly_lock_schema() -> utoipa::openapi::Object {
    grammar::duration_schema(
        "When the ransomware heuristic flags a backup of the plan, lock the newest \
         unflagged point before it for this long (a lock, never an action on the host); \
         null: never (the default).",
        true,
    )
}

fn require_schema() -> utoipa::openapi::Object {
    grammar::nullable_enum_schema(
        "What `protected` requires of the copies: `nothing` (they are shown, the plan's \
         own points decide; also null or missing), `proven` (a copy inside the RPO, \
         recoverable with fresh restore evidence of its own), `immutable-off-host` (as \
         `proven`, and off this host, held by a lock its storage enforces).",
        &REPLICA_REQUIREMENTS,
    )
}

/// The names of [`ReplicaRequirement`]s in the API.
pub(crate) const REPLICA_REQUIREMENTS: [&str; 3] = ["nothing", "proven", "immutable-off-host"];

/// A plan's second copy: every new point is copied into `repository`, and
/// the copy is verified and restore-tested on its own.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReplicaInput {
    /// The repository the copies go to; not the plan's own.
    #[schema(min_length = 1, max_length = 255)]
    pub repository: String,
    /// Lock each copy for this long (default: null).
    #[serde(default, deserialize_with = "double")]
    #[schema(schema_with = lock_for_schema)]
    pub lock_for: Option<Option<String>>,
    /// What `protected` requires of the copies (default: `nothing`).
    #[serde(default)]
    #[schema(schema_with = require_schema)]
    pub require: Option<String>,
}

/// The input of `PUT /api/v1/plans/{id}` (and, with `id` and `source`
/// required, of `POST`, see [`NewPlan`]): a plan without its derived fields.
/// Missing or null fields take the defaults of `GET /api/v1/plans/defaults`
/// (on `PUT`: `source` and `paused` keep their current values). A given
/// `retention` object is taken as is (a missing rule is no rule). Unknown
/// fields are ignored, so a plan as read can be sent back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PlanInput {
    /// The plan id. On `PUT` it may be left out, and if given must equal
    /// the id in the path (so it is not in the `PUT` schema: no JSON Schema
    /// can say "equal to the path").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub id: Option<String>,
    /// An absolute path, or `agent:<name>:<absolute path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = source_schema_nullable)]
    pub source: Option<String>,
    /// When the plan runs.
    #[serde(default)]
    #[schema(schema_with = schedule_schema)]
    pub schedule: Option<String>,
    /// Recovery point objective.
    #[serde(default)]
    #[schema(schema_with = rpo_schema)]
    pub rpo: Option<String>,
    /// Target repository.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 255)]
    pub repository: Option<String>,
    /// Paused.
    #[serde(default)]
    pub paused: Option<bool>,
    /// Keep rules.
    #[serde(default, deserialize_with = "object")]
    pub retention: Option<RetentionInput>,
    /// Verification policy.
    #[serde(default, deserialize_with = "object")]
    pub verification: Option<VerificationInput>,
    /// Restore-test policy.
    #[serde(default, deserialize_with = "object")]
    pub restore_test: Option<RestoreTestInput>,
    /// A second copy (null or missing: none).
    #[serde(default, deserialize_with = "object")]
    #[schema(nullable)]
    pub replica: Option<ReplicaInput>,
    /// How a `pve:` source's guest is dumped (null or missing: snapshot
    /// mode, dumps kept).
    #[serde(default, deserialize_with = "object")]
    #[schema(nullable)]
    pub proxmox: Option<ProxmoxInput>,
    /// On an anomaly, lock the newest unflagged point before it for this
    /// long (null or missing: never).
    #[serde(default, deserialize_with = "double")]
    #[schema(schema_with = anomaly_lock_schema)]
    pub anomaly_lock: Option<Option<String>>,
    /// For a file-system source: further paths into the same point, and
    /// what is left out (null or missing: the source's path alone, nothing
    /// left out).
    #[serde(default, deserialize_with = "object")]
    #[schema(nullable)]
    pub files: Option<FilesInput>,
    /// Programs run before and after each backup (null or missing: none).
    #[serde(default, deserialize_with = "object")]
    #[schema(nullable)]
    pub hooks: Option<HooksInput>,
    /// The schedule's and retention's time zone (null: UTC).
    #[serde(default, deserialize_with = "double")]
    #[schema(schema_with = crate::plan_files::plan_time_zone_schema)]
    pub time_zone: Option<Option<String>>,
}

/// The body of `POST /api/v1/plans`, for the OpenAPI document only (the
/// server reads a [`PlanInput`] and answers 422 for a missing `id` or
/// `source`): [`PlanInput`] with `id` and `source` required and not null.
pub(crate) enum NewPlan {}

impl utoipa::PartialSchema for NewPlan {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Schema;
        use utoipa::openapi::RefOr;
        let mut schema = <PlanInput as utoipa::PartialSchema>::schema();
        if let RefOr::T(Schema::Object(o)) = &mut schema {
            o.description = Some(
                "A new plan: the input of `PUT /api/v1/plans/{id}` with `id` and `source` \
                 required. Missing or null fields take the defaults of \
                 `GET /api/v1/plans/defaults`; unknown fields are ignored."
                    .into(),
            );
            let id = grammar::pattern_schema(
                "`[a-z0-9][a-z0-9._-]{0,62}`, not `defaults`; unique among the plans.",
                grammar::PLAN_ID_PATTERN,
                Some(grammar::PLAN_ID_MAX_LEN),
                false,
            );
            o.properties.insert("id".into(), id.into());
            o.properties
                .insert("source".into(), source_schema(false).into());
            o.required = vec!["id".into(), "source".into()];
        }
        schema
    }
}

impl ToSchema for NewPlan {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <PlanInput as ToSchema>::schemas(schemas);
    }
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
            full_every: Some(Duration::from_secs(7 * DAY)),
            boot: None,
        },
        rpo: DEFAULT_RPO,
        repository: RepositoryId::new(DEFAULT_REPOSITORY),
        paused: false,
        replica: None,
        proxmox: None,
        anomaly_lock: None,
        files: Default::default(),
        hooks: Default::default(),
        time_zone: None,
    }
}

/// Refuses proof intervals shorter than `min` (the administrator's
/// minimum), as field errors (422).
pub(crate) fn intervals_allowed(def: &PlanDefinition, min: Duration) -> Result<(), WebError> {
    let intervals = [
        ("verification.every", def.verification.every),
        ("restore_test.every", def.restore_test.every),
        ("restore_test.full_every", def.restore_test.full_every),
    ];
    let fields: BTreeMap<String, String> = intervals
        .into_iter()
        .filter_map(|(field, every)| {
            every.filter(|e| *e < min).map(|e| {
                (
                    field.to_owned(),
                    format!(
                        "{} is shorter than the shortest interval this service allows ({}, set by [jobs] min_every)",
                        human(e),
                        human(min)
                    ),
                )
            })
        })
        .collect();
    if fields.is_empty() {
        return Ok(());
    }
    Err(WebError::Invalid {
        message: format!(
            "the plan does not validate: {}",
            fields.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        fields,
    })
}

/// `GET /api/v1/plans/defaults`: an input with every default filled in.
pub(crate) fn defaults_input() -> PlanInput {
    let mut input = input_of(&default_definition());
    input.source = None;
    input
}

/// A definition as input: every field given, so that validating it gives
/// the definition back.
pub(crate) fn input_of(d: &PlanDefinition) -> PlanInput {
    let d = d.clone();
    PlanInput {
        id: None,
        source: Some(d.source),
        schedule: Some(d.schedule),
        rpo: Some(human(d.rpo)),
        repository: Some(d.repository.to_string()),
        paused: Some(d.paused),
        retention: Some(RetentionInput::of(&d.retention)),
        verification: Some(VerificationInput {
            after_backup: Some(d.verification.after_backup),
            every: Some(d.verification.every.map(human)),
            depth: Some(depth_label(d.verification.depth)),
        }),
        restore_test: Some(RestoreTestInput {
            every: Some(d.restore_test.every.map(human)),
            max_evidence_age: Some(human(d.restore_test.max_evidence_age)),
            sample_files: Some(d.restore_test.sample_files),
            full_every: Some(d.restore_test.full_every.map(human)),
            boot: d.restore_test.boot.map(|b| BootInput {
                marker: Some(b.marker),
                timeout: Some(human(b.timeout)),
                memory_mib: Some(u64::from(b.memory_mib)),
            }),
        }),
        replica: d.replica.map(|r| ReplicaInput {
            repository: r.repository.to_string(),
            lock_for: Some(r.lock_for.map(human)),
            require: Some(r.require.as_str().to_owned()),
        }),
        proxmox: d.proxmox.map(|p| ProxmoxInput {
            mode: Some(p.mode.as_str().to_owned()),
            remove_dump: Some(p.remove_dump),
        }),
        anomaly_lock: Some(d.anomaly_lock.map(human)),
        files: Some(crate::plan_files::files_input(&d.files)),
        hooks: Some(crate::plan_files::hooks_input(&d.hooks)),
        time_zone: Some(d.time_zone),
    }
}

/// A boot check from its input; errors by field.
fn boot_check(b: BootInput, errors: &mut BTreeMap<String, String>) -> BootCheck {
    let marker = b.marker.unwrap_or_else(|| BootCheck::DEFAULT_MARKER.into());
    if marker.is_empty() || marker.chars().count() > 200 {
        errors.insert(
            "restore_test.boot.marker".into(),
            "must be 1 to 200 characters".into(),
        );
    }
    let timeout = match b.timeout {
        Some(t) => {
            duration("restore_test.boot.timeout", &t, errors).unwrap_or(BootCheck::DEFAULT_TIMEOUT)
        }
        None => BootCheck::DEFAULT_TIMEOUT,
    };
    BootCheck {
        marker,
        timeout,
        memory_mib: b
            .memory_mib
            .map_or(BootCheck::DEFAULT_MEMORY_MIB, |m| m as u32),
    }
}

/// Parses a depth label (`structure`, `read-all`, `read-sample:N` with N in
/// 1..=100 written without leading zeros or sign).
pub(crate) fn parse_depth(s: &str) -> Result<VerifyDepth, String> {
    match s {
        "structure" => Ok(VerifyDepth::Structure),
        "read-all" => Ok(VerifyDepth::ReadAll),
        _ => {
            let n = s.strip_prefix("read-sample:").ok_or_else(|| {
                format!("{s:?}: expected structure, read-all or read-sample:N (N in 1..=100)")
            })?;
            let digits_ok = !n.is_empty()
                && n.len() <= 3
                && n.bytes().all(|b| b.is_ascii_digit())
                && !n.starts_with('0');
            match n.parse::<u8>() {
                Ok(n) if digits_ok && (1..=100).contains(&n) => Ok(VerifyDepth::ReadSample(n)),
                _ => Err(format!(
                    "{s:?}: N of read-sample:N must be a number in 1..=100"
                )),
            }
        }
    }
}

pub(crate) fn duration(
    field: &str,
    s: &str,
    errors: &mut BTreeMap<String, String>,
) -> Option<Duration> {
    let parsed = if grammar::is_duration(s) {
        humantime::parse_duration(s).ok().filter(|d| !d.is_zero())
    } else {
        None
    };
    if parsed.is_none() {
        errors.insert(
            field.into(),
            format!(
                "{s:?} is not a duration like \"26h\", \"1day 2h\" or \"1h30m\" \
                 (<number><unit> parts, not zero)"
            ),
        );
    }
    parsed
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
    if !errors.contains_key("id") && !grammar::is_plan_id(&id) {
        let why = if id == grammar::RESERVED_PLAN_ID {
            format!("{id:?} is reserved (GET /api/v1/plans/defaults); choose another id")
        } else {
            format!("{id:?} must match [a-z0-9][a-z0-9._-]{{0,62}}")
        };
        errors.insert("id".into(), why);
    }
    let mut def = base;
    match input.source {
        Some(s) => {
            if let Some(e) = grammar::source_error(&s) {
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
        if !grammar::is_schedule(&s) {
            errors.insert(
                "schedule".into(),
                format!(
                    "{s:?} is not a schedule: expected 5 fields `minute hour day-of-month month \
                     day-of-week` of numbers, `*`, `*/step`, `a-b`, `a-b/step` or lists of them \
                     (e.g. \"0 2 * * *\"), or @hourly, @daily, @weekly, @monthly, @yearly"
                ),
            );
        } else if let Err(e) = Schedule::parse(&s) {
            errors.insert("schedule".into(), e.to_string());
        }
        def.schedule = s;
    }
    if let Some(r) = input.rpo {
        if let Some(d) = duration("rpo", &r, &mut errors) {
            def.rpo = d;
        }
    }
    let repository_given = input.repository.is_some();
    if let Some(r) = input.repository {
        if r.is_empty() || r.chars().count() > grammar::REPOSITORY_MAX_LEN {
            errors.insert(
                "repository".into(),
                format!("must be 1 to {} characters", grammar::REPOSITORY_MAX_LEN),
            );
        }
        def.repository = RepositoryId::new(r);
    }
    // An agent writes only into its own repository (docs/agents.md): its
    // plans default to it. One naming another is accepted (the document
    // cannot express the rule) and fails at its first run, saying why.
    if let Some((agent, _)) = vouch_events::sources::agent_source(&def.source) {
        if !repository_given {
            def.repository = RepositoryId::new(vouch_events::sources::agent_repository(agent));
        }
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
            tags: r.tags.unwrap_or_default(),
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
        match r.full_every {
            Some(Some(e)) => pol.full_every = duration("restore_test.full_every", &e, &mut errors),
            Some(None) => pol.full_every = None,
            None => {}
        }
        pol.boot = r.boot.map(|b| boot_check(b, &mut errors));
        def.restore_test = pol;
    }
    def.replica = input.replica.map(|r| {
        if r.repository.is_empty() || r.repository.chars().count() > grammar::REPOSITORY_MAX_LEN {
            errors.insert(
                "replica.repository".into(),
                format!("must be 1 to {} characters", grammar::REPOSITORY_MAX_LEN),
            );
        }
        // A replica equal to the plan's own repository is accepted (the
        // document cannot say "another than `repository`"); its copy jobs
        // fail saying why, and the console's form says it before saving.
        let lock_for = match r.lock_for {
            Some(Some(d)) => duration("replica.lock_for", &d, &mut errors),
            _ => None,
        };
        let require = match r.require.as_deref() {
            None => ReplicaRequirement::Nothing,
            Some(s) => ReplicaRequirement::parse(s).unwrap_or_else(|| {
                errors.insert(
                    "replica.require".into(),
                    format!("{s:?}: expected one of {}", REPLICA_REQUIREMENTS.join(", ")),
                );
                ReplicaRequirement::Nothing
            }),
        };
        ReplicaPolicy {
            repository: RepositoryId::new(r.repository),
            lock_for,
            require,
        }
    });
    def.proxmox = input.proxmox.map(|p| ProxmoxPolicy {
        mode: match p.mode.as_deref() {
            None => DumpMode::Snapshot,
            Some(m) => DumpMode::parse(m).unwrap_or_else(|| {
                errors.insert(
                    "proxmox.mode".into(),
                    format!("{m:?}: expected one of {}", DUMP_MODES.join(", ")),
                );
                DumpMode::Snapshot
            }),
        },
        remove_dump: p.remove_dump.unwrap_or(false),
    });
    match input.anomaly_lock {
        Some(Some(d)) => def.anomaly_lock = duration("anomaly_lock", &d, &mut errors),
        Some(None) => def.anomaly_lock = None,
        None => {}
    }
    def.files = crate::plan_files::files(input.files.unwrap_or_default(), &mut errors);
    def.hooks = crate::plan_files::hooks(input.hooks.unwrap_or_default(), &mut errors);
    match input.time_zone {
        Some(Some(z)) => def.time_zone = crate::plan_files::time_zone(z, &mut errors),
        Some(None) => def.time_zone = None,
        None => {}
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

    /// JSON Schema's integers include integral floats (schemathesis sends
    /// `-27879068.0` for an exit code); fractions and values beyond `i32`
    /// are refused.
    #[test]
    fn whole_i32_takes_integral_floats_in_range() {
        #[derive(Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "whole_i32")]
            v: Option<i32>,
        }
        let v = |text: &str| serde_json::from_str::<T>(text).map(|t| t.v);
        assert_eq!(v(r#"{"v": -27879068.0}"#).unwrap(), Some(-27_879_068));
        assert_eq!(v(r#"{"v": 3}"#).unwrap(), Some(3));
        assert_eq!(v(r#"{"v": -2147483648}"#).unwrap(), Some(i32::MIN));
        assert_eq!(v(r#"{"v": null}"#).unwrap(), None);
        assert_eq!(v("{}").unwrap(), None);
        assert!(v(r#"{"v": 2147483648}"#).is_err());
        assert!(v(r#"{"v": 1.5}"#).is_err());
        assert!(v(r#"{"v": "3"}"#).is_err());
    }

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
    fn an_empty_id_is_refused() {
        let input = PlanInput {
            id: Some(String::new()),
            source: Some("/data".into()),
            ..PlanInput::default()
        };
        let Err(WebError::Invalid { fields, .. }) = definition(input, default_definition(), None)
        else {
            panic!("expected invalid");
        };
        assert!(fields.contains_key("id"), "{fields:?}");
    }

    #[test]
    fn objects_must_be_objects() {
        for bad in [
            serde_json::json!({"verification": [null, null]}),
            serde_json::json!({"retention": [1, 2]}),
            serde_json::json!({"restore_test": ["1day"]}),
        ] {
            assert!(
                serde_json::from_value::<PlanInput>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let not_object = serde_json::json!([null, null]);
        assert!(
            serde_json::from_value::<serde_json::Map<String, serde_json::Value>>(not_object)
                .is_err()
        );
    }

    #[test]
    fn depth_labels_are_strict() {
        for bad in [
            "read-sample:+5",
            "read-sample:050",
            "read-sample:",
            "Structure",
        ] {
            assert!(parse_depth(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn integral_floats_count_as_integers_and_bounds_hold() {
        let input: Result<PlanInput, _> = serde_json::from_value(serde_json::json!({
            "retention": {"daily": 7.0, "monthly": 4294967295u64},
            "restore_test": {"sample_files": 1e3}
        }));
        let input = input.unwrap_or_else(|e| panic!("{e}"));
        let r = input.retention.unwrap_or_default();
        assert_eq!((r.daily, r.monthly), (Some(7), Some(u32::MAX)));
        assert_eq!(
            input.restore_test.and_then(|t| t.sample_files),
            Some(Some(1000))
        );
        for bad in [
            serde_json::json!({"retention": {"daily": 7.5}}),
            serde_json::json!({"retention": {"daily": -1}}),
            serde_json::json!({"retention": {"daily": 4294967296u64}}),
            serde_json::json!({"restore_test": {"sample_files": 0}}),
            serde_json::json!({"restore_test": {"sample_files": "1"}}),
        ] {
            assert!(
                serde_json::from_value::<PlanInput>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn new_plan_is_plan_input_with_id_and_source_required() {
        use utoipa::openapi::schema::Schema;
        use utoipa::openapi::RefOr;
        use utoipa::PartialSchema;
        let (RefOr::T(Schema::Object(new)), RefOr::T(Schema::Object(put))) =
            (NewPlan::schema(), PlanInput::schema())
        else {
            panic!("object schemas expected");
        };
        assert_eq!(new.required, ["id", "source"]);
        let mut keys: Vec<_> = put.properties.keys().cloned().collect();
        keys.push("id".into());
        keys.sort();
        assert_eq!(new.properties.keys().cloned().collect::<Vec<_>>(), keys);
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
