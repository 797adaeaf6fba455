//! A plan's file selection, hooks and time zone in the API: input types,
//! their JSON Schemas (exact: what the schema allows is what validation
//! accepts), validation with an error per field, and the way back.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
use utoipa::ToSchema;
use vouch_events::{BackupHooks, FileSelection, Hook};

use crate::api::grammar;
use crate::views::human;

/// At most this many `also` paths.
pub(crate) const MAX_ALSO: usize = 64;
/// At most this many exclude patterns.
pub(crate) const MAX_EXCLUDES: usize = 256;
/// At most this many characters in an exclude pattern.
pub(crate) const MAX_PATTERN_LEN: usize = 1024;
/// At most this many exclude files.
pub(crate) const MAX_EXCLUDE_FILES: usize = 64;
/// At most this many marker names.
pub(crate) const MAX_MARKERS: usize = 32;
/// At most this many characters in a marker name.
pub(crate) const MAX_MARKER_LEN: usize = 255;
/// At most this many arguments of a hook.
pub(crate) const MAX_HOOK_ARGS: usize = 32;
/// At most this many characters in a hook argument.
pub(crate) const MAX_HOOK_ARG_LEN: usize = 1024;
/// The largest size limit (1 EiB).
pub(crate) const MAX_SIZE_LIMIT: u64 = 1 << 60;
/// A hook's timeout when the plan gives none.
pub(crate) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// An absolute path of plain components (no `.`, `..` or empty ones, no
/// NUL), optionally ending in `/`: [`grammar::source_error`] on a path.
pub(crate) const PLAIN_PATH_PATTERN: &str = r"^/(?:(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)(?:/(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+))*/?)?$";
/// A glob without classes, alternatives or escapes (`[`, `]`, `{`, `}`,
/// `\`): every such pattern compiles.
pub(crate) const EXCLUDE_PATTERN: &str = r"^[^\[\]{}\\\x00]+$";
/// A file name: no `/`, no NUL, not `.` or `..`.
pub(crate) const MARKER_PATTERN: &str =
    r"^(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)$";
/// A hook's name ([`vouch_events::valid_hook_name`]).
pub(crate) const HOOK_NAME_PATTERN: &str = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$";
/// A hook argument: anything but NUL.
pub(crate) const HOOK_ARG_PATTERN: &str = r"^[^\x00]*$";

fn nullable_list(
    description: &str,
    item: ObjectBuilder,
    max_items: usize,
) -> utoipa::openapi::schema::Array {
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .description(Some(description))
        .items(item)
        .max_items(Some(max_items))
        .build()
}

fn string_item(pattern: &str, min: usize, max: usize) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .min_length(Some(min))
        .max_length(Some(max))
}

fn also_schema() -> utoipa::openapi::schema::Array {
    nullable_list(
        "Further absolute paths of the source's host, backed up into the same point as \
         the source's own path (null: none).",
        string_item(PLAIN_PATH_PATTERN, 1, grammar::SOURCE_MAX_LEN),
        MAX_ALSO,
    )
}

fn exclude_schema() -> utoipa::openapi::schema::Array {
    nullable_list(
        "Glob patterns left out: one with a `/` matches the absolute path (`*` stops at \
         `/`, `**` crosses it), any other the file name (`*.tmp`). Classes, alternatives \
         and escapes (`[`, `]`, `{`, `}`, `\\`) are not taken in plans: list each \
         alternative as its own pattern (null: none).",
        string_item(EXCLUDE_PATTERN, 1, MAX_PATTERN_LEN),
        MAX_EXCLUDES,
    )
}

fn exclude_files_schema() -> utoipa::openapi::schema::Array {
    nullable_list(
        "Files on the source's host with one pattern a line (`#` comments); they must \
         pass the host's source policy like the paths (null: none).",
        string_item(PLAIN_PATH_PATTERN, 1, grammar::SOURCE_MAX_LEN),
        MAX_EXCLUDE_FILES,
    )
}

fn markers_schema() -> utoipa::openapi::schema::Array {
    nullable_list(
        "Skip the contents of directories holding a file of one of these names; the file \
         itself is kept (null: none).",
        string_item(MARKER_PATTERN, 1, MAX_MARKER_LEN),
        MAX_MARKERS,
    )
}

fn args_schema() -> utoipa::openapi::schema::Array {
    nullable_list(
        "The hook's arguments (null: none).",
        string_item(HOOK_ARG_PATTERN, 0, MAX_HOOK_ARG_LEN),
        MAX_HOOK_ARGS,
    )
}

fn larger_than_schema() -> utoipa::openapi::Object {
    grammar::integer_schema(
        "Leave out regular files larger than this many bytes (null: no limit).",
        1,
        MAX_SIZE_LIMIT,
        true,
    )
}

fn hook_name_schema() -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "The program's file name in the host's hook directory (`[hooks] dir` of the \
         server, `--hooks-dir` of an agent): 1 to 64 of A-Z a-z 0-9 . _ -, not starting \
         with a dot.",
        HOOK_NAME_PATTERN,
        Some(64),
        false,
    )
}

fn hook_timeout_schema() -> utoipa::openapi::Object {
    grammar::duration_schema(
        "The hook is killed, and counts as failed, after this long (null or missing: 10m).",
        true,
    )
}

fn time_zone_schema() -> utoipa::openapi::Object {
    let names: Vec<&str> = vouch_actors::time_zone_names()
        .iter()
        .map(String::as_str)
        .collect();
    grammar::nullable_enum_schema(
        "The IANA time zone the schedule is read in and retention's hours, days, weeks, \
         months and years are counted in, from the tz database built into Vouch (null or \
         missing: UTC). Daylight saving: a time skipped in spring runs at the first minute \
         after the gap, a time repeated in autumn runs once.",
        &names,
    )
}

fn nullable_bool_schema(description: &str) -> utoipa::openapi::Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .description(Some(description))
        .build()
}

fn caches_schema() -> utoipa::openapi::Object {
    nullable_bool_schema(
        "Skip the contents of directories with a valid CACHEDIR.TAG (null or missing: false).",
    )
}

fn one_fs_schema() -> utoipa::openapi::Object {
    nullable_bool_schema(
        "Stay on each path's file system; mount points are recorded empty (null or missing: false).",
    )
}

fn size_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::validate::whole(d, 1, MAX_SIZE_LIMIT)
}

/// What a file-system backup of the plan reads and leaves out. Every field
/// may be missing or null (nothing more, nothing left out).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct FilesInput {
    /// Further paths backed up into the same point.
    #[serde(default)]
    #[schema(schema_with = also_schema)]
    pub also: Option<Vec<String>>,
    /// Patterns left out.
    #[serde(default)]
    #[schema(schema_with = exclude_schema)]
    pub exclude: Option<Vec<String>>,
    /// Files of patterns.
    #[serde(default)]
    #[schema(schema_with = exclude_files_schema)]
    pub exclude_files: Option<Vec<String>>,
    /// Skip tagged cache directories.
    #[serde(default)]
    #[schema(schema_with = caches_schema)]
    pub exclude_caches: Option<bool>,
    /// Stay on each path's file system.
    #[serde(default)]
    #[schema(schema_with = one_fs_schema)]
    pub one_file_system: Option<bool>,
    /// Marker file names.
    #[serde(default)]
    #[schema(schema_with = markers_schema)]
    pub exclude_if_present: Option<Vec<String>>,
    /// Size limit in bytes.
    #[serde(default, deserialize_with = "size_limit")]
    #[schema(schema_with = larger_than_schema)]
    pub exclude_larger_than: Option<u64>,
}

/// One hook.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HookInput {
    /// The program's name in the host's hook directory.
    #[schema(schema_with = hook_name_schema)]
    pub name: String,
    /// Its arguments.
    #[serde(default)]
    #[schema(schema_with = args_schema)]
    pub args: Option<Vec<String>>,
    /// Its timeout.
    #[serde(default)]
    #[schema(schema_with = hook_timeout_schema)]
    pub timeout: Option<String>,
}

/// Programs the backup's host runs around each backup of the plan. Only
/// programs its administrator installed in its hook directory can run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct HooksInput {
    /// Before the backup: if it fails or times out, the backup does not run
    /// and fails (`hook.failed`, then `job.failed`). Null: none.
    #[serde(default, deserialize_with = "crate::validate::object")]
    #[schema(nullable)]
    pub pre: Option<HookInput>,
    /// After the backup, whether it succeeded or not
    /// (`VOUCH_BACKUP_STATUS` is `ok` or `failed`); its failure is recorded
    /// (`hook.failed`, a warning alert) and the backup stands. Null: none.
    #[serde(default, deserialize_with = "crate::validate::object")]
    #[schema(nullable)]
    pub post: Option<HookInput>,
}

/// The time zone field's schema, for [`crate::validate::PlanInput`].
pub(crate) fn plan_time_zone_schema() -> utoipa::openapi::Object {
    time_zone_schema()
}

/// The input of a selection (every field given).
pub(crate) fn files_input(f: &FileSelection) -> FilesInput {
    FilesInput {
        also: Some(f.also.clone()),
        exclude: Some(f.exclude.clone()),
        exclude_files: Some(f.exclude_files.clone()),
        exclude_caches: Some(f.exclude_caches),
        one_file_system: Some(f.one_file_system),
        exclude_if_present: Some(f.exclude_if_present.clone()),
        exclude_larger_than: f.exclude_larger_than,
    }
}

/// The input of hooks (every field given).
pub(crate) fn hooks_input(h: &BackupHooks) -> HooksInput {
    let one = |h: &Hook| HookInput {
        name: h.name.clone(),
        args: Some(h.args.clone()),
        timeout: Some(human(h.timeout)),
    };
    HooksInput {
        pre: h.pre.as_ref().map(one),
        post: h.post.as_ref().map(one),
    }
}

fn list_errors(
    field: &str,
    items: &[String],
    ok: impl Fn(&str) -> Result<(), String>,
    errors: &mut BTreeMap<String, String>,
) {
    for (i, item) in items.iter().enumerate() {
        if let Err(why) = ok(item) {
            errors.insert(format!("{field}[{i}]"), why);
            return;
        }
    }
}

fn plain_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!("{p:?}: an absolute path"));
    }
    match grammar::source_error(p) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn length(p: &str, min: usize, max: usize) -> Result<(), String> {
    let n = p.chars().count();
    if n < min || n > max {
        return Err(format!("must be {min} to {max} characters"));
    }
    Ok(())
}

/// A selection from its input; errors by field. Only file-system sources
/// select files; a plan of another kind with a selection is accepted (the
/// document cannot tie one field to another) and its backups fail saying
/// why (`options_unsupported`).
pub(crate) fn files(input: FilesInput, errors: &mut BTreeMap<String, String>) -> FileSelection {
    let f = FileSelection {
        also: input.also.unwrap_or_default(),
        exclude: input.exclude.unwrap_or_default(),
        exclude_files: input.exclude_files.unwrap_or_default(),
        exclude_caches: input.exclude_caches.unwrap_or(false),
        one_file_system: input.one_file_system.unwrap_or(false),
        exclude_if_present: input.exclude_if_present.unwrap_or_default(),
        exclude_larger_than: input.exclude_larger_than,
    };
    let counts = [
        ("files.also", f.also.len(), MAX_ALSO),
        ("files.exclude", f.exclude.len(), MAX_EXCLUDES),
        (
            "files.exclude_files",
            f.exclude_files.len(),
            MAX_EXCLUDE_FILES,
        ),
        (
            "files.exclude_if_present",
            f.exclude_if_present.len(),
            MAX_MARKERS,
        ),
    ];
    for (field, n, max) in counts {
        if n > max {
            errors.insert(field.into(), format!("at most {max} entries"));
        }
    }
    list_errors("files.also", &f.also, plain_path, errors);
    list_errors("files.exclude_files", &f.exclude_files, plain_path, errors);
    list_errors(
        "files.exclude",
        &f.exclude,
        |p| {
            length(p, 1, MAX_PATTERN_LEN)?;
            if p.contains(['[', ']', '{', '}', '\\', '\0']) {
                return Err(format!(
                    "{p:?}: classes, alternatives and escapes ([ ] {{ }} \\) are not taken in plans; list each alternative as a pattern of its own"
                ));
            }
            Ok(())
        },
        errors,
    );
    list_errors(
        "files.exclude_if_present",
        &f.exclude_if_present,
        |n| {
            length(n, 1, MAX_MARKER_LEN)?;
            if n.contains(['/', '\0']) || n == "." || n == ".." {
                return Err(format!("{n:?}: a file name (no `/`, not `.` or `..`)"));
            }
            Ok(())
        },
        errors,
    );
    f
}

/// Hooks from their input; errors by field. Hooks run around file-system
/// backups, on the host that reads the files (the server, or an agent from
/// its own hook directory): a guest's plan with hooks is accepted (the
/// document cannot tie one field to another) and its backups fail saying
/// why (`options_unsupported`), never skipping a hook silently.
pub(crate) fn hooks(input: HooksInput, errors: &mut BTreeMap<String, String>) -> BackupHooks {
    let mut one = |phase: &str, h: HookInput| {
        let field = format!("hooks.{phase}");
        if !vouch_events::valid_hook_name(&h.name) {
            errors.insert(
                format!("{field}.name"),
                format!(
                    "{:?}: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot",
                    h.name
                ),
            );
        }
        let args = h.args.unwrap_or_default();
        if args.len() > MAX_HOOK_ARGS {
            errors.insert(
                format!("{field}.args"),
                format!("at most {MAX_HOOK_ARGS} arguments"),
            );
        }
        list_errors(
            &format!("{field}.args"),
            &args,
            |a| {
                length(a, 0, MAX_HOOK_ARG_LEN)?;
                if a.contains('\0') {
                    return Err("must not contain NUL".into());
                }
                Ok(())
            },
            errors,
        );
        let timeout = match h.timeout {
            Some(t) => crate::validate::duration(&format!("{field}.timeout"), &t, errors)
                .unwrap_or(DEFAULT_HOOK_TIMEOUT),
            None => DEFAULT_HOOK_TIMEOUT,
        };
        Hook {
            name: h.name,
            args,
            timeout,
        }
    };
    BackupHooks {
        pre: input.pre.map(|h| one("pre", h)),
        post: input.post.map(|h| one("post", h)),
    }
}

/// What a leased backup selects and runs, as the agent reads it: the
/// API's own checks, so an agent never runs what a plan could not say.
/// An error names each field that does not validate.
pub fn leased_options(
    job: &crate::api::agent::LeasedJob,
) -> Result<(FileSelection, BackupHooks), String> {
    let mut errors = BTreeMap::new();
    let selection = files(job.files.clone().unwrap_or_default(), &mut errors);
    let hooks = hooks(job.hooks.clone().unwrap_or_default(), &mut errors);
    if errors.is_empty() {
        Ok((selection, hooks))
    } else {
        Err(errors
            .iter()
            .map(|(field, why)| format!("{field}: {why}"))
            .collect::<Vec<_>>()
            .join("; "))
    }
}

/// A time zone from its input; errors by field.
pub(crate) fn time_zone(name: String, errors: &mut BTreeMap<String, String>) -> Option<String> {
    if let Err(e) = vouch_actors::time_zone(&name) {
        errors.insert("time_zone".into(), e.to_string());
    }
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: serde_json::Value) -> BTreeMap<String, String> {
        let mut errors = BTreeMap::new();
        let f: FilesInput = serde_json::from_value(input).unwrap();
        files(f, &mut errors);
        errors
    }

    #[test]
    fn a_selection_round_trips_and_bad_entries_are_named() {
        let mut errors = BTreeMap::new();
        let f: FilesInput = serde_json::from_value(serde_json::json!({
            "also": ["/var/www", "/home/"],
            "exclude": ["*.tmp", "/home/*/.cache", "**/node_modules"],
            "exclude_files": ["/etc/vouch/excludes"],
            "exclude_caches": true,
            "one_file_system": true,
            "exclude_if_present": [".nobackup"],
            "exclude_larger_than": 1024.0
        }))
        .unwrap();
        let sel = files(f, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(sel.exclude_larger_than, Some(1024));
        let mut again = BTreeMap::new();
        assert_eq!(files(files_input(&sel), &mut again), sel);
        assert!(again.is_empty());

        let e = check(serde_json::json!({"also": ["/ok", "relative"]}));
        assert!(e.contains_key("files.also[1]"), "{e:?}");
        let e = check(serde_json::json!({"also": ["/a/../b"]}));
        assert!(e.contains_key("files.also[0]"), "{e:?}");
        let e = check(serde_json::json!({"exclude": ["*.[oa]"]}));
        assert!(e["files.exclude[0]"].contains("alternative"), "{e:?}");
        let e = check(serde_json::json!({"exclude_if_present": [".."]}));
        assert!(e.contains_key("files.exclude_if_present[0]"), "{e:?}");
        assert!(check(serde_json::json!({})).is_empty());
    }

    /// Every pattern the API takes compiles as the engine compiles it.
    #[test]
    fn every_accepted_exclude_pattern_compiles() {
        let re = regex_lite_match(EXCLUDE_PATTERN);
        for p in [
            "*", "**", "a**b", "/x/**/y", "?", "a,b", "/", "*.tmp/", "é*",
        ] {
            assert!(re(p), "{p}");
            globset::GlobBuilder::new(p.trim_end_matches('/'))
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .unwrap_or_else(|e| panic!("{p}: {e}"));
        }
        for p in ["[", "a{b", "x\\"] {
            assert!(!re(p), "{p}");
        }
    }

    /// The exclude pattern's character rule, without a regex engine.
    fn regex_lite_match(pattern: &str) -> impl Fn(&str) -> bool {
        assert_eq!(pattern, EXCLUDE_PATTERN);
        |s: &str| !s.is_empty() && !s.contains(['[', ']', '{', '}', '\\', '\0'])
    }

    #[test]
    fn hooks_are_named_not_commands() {
        let mut errors = BTreeMap::new();
        let h: HooksInput = serde_json::from_value(serde_json::json!({
            "pre": {"name": "dump-db", "args": ["--all"], "timeout": "5m"},
            "post": {"name": "notify"}
        }))
        .unwrap();
        let hooks = hooks(h, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            hooks.pre.as_ref().unwrap().timeout,
            Duration::from_secs(300)
        );
        assert_eq!(hooks.post.as_ref().unwrap().timeout, DEFAULT_HOOK_TIMEOUT);
        for bad in ["/bin/sh", "../x", ".hidden", "rm -rf /", ""] {
            let mut errors = BTreeMap::new();
            let h = HooksInput {
                pre: Some(HookInput {
                    name: bad.into(),
                    args: None,
                    timeout: None,
                }),
                post: None,
            };
            super::hooks(h, &mut errors);
            assert!(errors.contains_key("hooks.pre.name"), "{bad}: {errors:?}");
        }
    }

    #[test]
    fn time_zones_are_the_listed_names() {
        let mut errors = BTreeMap::new();
        assert_eq!(
            time_zone("Europe/Berlin".into(), &mut errors).as_deref(),
            Some("Europe/Berlin")
        );
        assert!(errors.is_empty());
        time_zone("Europe/Atlantis".into(), &mut errors);
        assert!(errors.contains_key("time_zone"));
    }
}
