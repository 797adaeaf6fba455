//! The grammars of the API's input strings, in one place for the server's
//! checks and the OpenAPI document, so the two cannot drift: each grammar is
//! a hand-written check (what the server accepts) and the same language as
//! an ECMA-262 `pattern` (what the document promises). Tests compare the two
//! on samples; schemathesis compares them on generated data in CI.
//!
//! The grammars are deliberately strict subsets of what the engine's parsers
//! (humantime, croner) would take, so that every string matching a pattern
//! is one the engine accepts and every other string is refused with 422.

use serde::Deserialize;
use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, SchemaType, Type};
use utoipa::openapi::{KnownFormat, Object};

/// Units of a duration (a subset of humantime's; `µs` is left out).
pub(crate) const DURATION_UNITS: [&str; 39] = [
    "nanos", "nsec", "ns", "usec", "us", "millis", "msec", "ms", "seconds", "second", "secs",
    "sec", "s", "minutes", "minute", "mins", "min", "m", "hours", "hour", "hrs", "hr", "h", "days",
    "day", "d", "weeks", "week", "wks", "wk", "w", "months", "month", "M", "years", "year", "yrs",
    "yr", "y",
];
/// The longest duration string accepted.
pub(crate) const DURATION_MAX_LEN: usize = 64;

/// A duration: one or more `<number><unit>` (`26h`, `1day 2h`, `1h30m`),
/// optionally separated by one space; numbers of at most 9 digits without
/// leading zeros; at least one number is not zero.
pub(crate) fn is_duration(s: &str) -> bool {
    if s.is_empty() || s.len() > DURATION_MAX_LEN {
        return false;
    }
    let b = s.as_bytes();
    let (mut i, mut nonzero) = (0, false);
    loop {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        if digits.is_empty() || digits.len() > 9 || (digits.len() > 1 && digits.starts_with('0')) {
            return false;
        }
        nonzero |= digits != "0";
        let unit_start = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        if !DURATION_UNITS.contains(&&s[unit_start..i]) {
            return false;
        }
        if i == b.len() {
            return nonzero;
        }
        if b[i] == b' ' {
            i += 1;
        }
    }
}

/// [`is_duration`] as a pattern.
pub(crate) fn duration_pattern() -> String {
    let u = DURATION_UNITS.join("|");
    let n = "(?:0|[1-9][0-9]{0,8})";
    format!("^(?:{n}(?:{u}) ?)*[1-9][0-9]{{0,8}}(?:{u})(?: ?{n}(?:{u}))*$")
}

/// Cron nicknames.
pub(crate) const CRON_NICKNAMES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];
/// The fields of a cron expression: minute, hour, day of month, month, day
/// of week (0 and 7 are Sunday), with their bounds.
const CRON_FIELDS: [(u16, u16); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
/// The longest schedule accepted.
pub(crate) const SCHEDULE_MAX_LEN: usize = 256;

/// A number in `lo..=hi` written without leading zeros.
fn cron_number(s: &str, lo: u16, hi: u16) -> Option<u16> {
    let ok = !s.is_empty()
        && s.len() <= 2
        && s.bytes().all(|c| c.is_ascii_digit())
        && (s.len() == 1 || !s.starts_with('0'));
    ok.then(|| s.parse::<u16>().ok())
        .flatten()
        .filter(|n| (lo..=hi).contains(n))
}

/// A step: 1 to 99.
fn cron_step(s: &str) -> bool {
    cron_number(s, 1, 99).is_some()
}

fn cron_field(f: &str, lo: u16, hi: u16) -> bool {
    if let Some(rest) = f.strip_prefix('*') {
        return rest.is_empty() || rest.strip_prefix('/').is_some_and(cron_step);
    }
    f.split(',').all(|item| {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        match range.split_once('-') {
            Some((a, b)) => match (cron_number(a, lo, hi), cron_number(b, lo, hi)) {
                (Some(a), Some(b)) => a <= b && step.is_none_or(cron_step),
                _ => false,
            },
            None => step.is_none() && cron_number(range, lo, hi).is_some(),
        }
    })
}

/// A schedule: a nickname (`@daily`, ...) or five fields separated by one
/// space (minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of
/// week 0-7), each `*`, `*/step` or a list of `n`, `a-b` or `a-b/step`
/// (numbers without leading zeros, `a <= b`, step 1-99). Names (`MON`,
/// `JAN`) and the `L`, `W`, `#`, `?` extensions are not accepted.
pub(crate) fn is_schedule(s: &str) -> bool {
    if s.chars().count() > SCHEDULE_MAX_LEN {
        return false;
    }
    if CRON_NICKNAMES.contains(&s) {
        return true;
    }
    let fields: Vec<&str> = s.split(' ').collect();
    fields.len() == CRON_FIELDS.len()
        && fields
            .iter()
            .zip(CRON_FIELDS)
            .all(|(f, (lo, hi))| cron_field(f, lo, hi))
}

/// A pattern for the numbers in `lo..=hi` (`hi < 100`), without leading
/// zeros.
fn number_pattern(lo: u16, hi: u16) -> String {
    let mut alternatives = Vec::new();
    for tens in lo / 10..=hi / 10 {
        let first = if tens == lo / 10 { lo % 10 } else { 0 };
        let last = if tens == hi / 10 { hi % 10 } else { 9 };
        let units = if first == last {
            first.to_string()
        } else {
            format!("[{first}-{last}]")
        };
        if tens == 0 {
            alternatives.push(units);
        } else {
            alternatives.push(format!("{tens}{units}"));
        }
    }
    alternatives.join("|")
}

fn cron_field_pattern(lo: u16, hi: u16) -> String {
    let step = "/(?:[1-9]|[1-9][0-9])";
    let ranges = (lo..=hi)
        .map(|a| format!("{a}-(?:{})", number_pattern(a, hi)))
        .collect::<Vec<_>>()
        .join("|");
    let item = format!("(?:{ranges})(?:{step})?|{}", number_pattern(lo, hi));
    format!("\\*(?:{step})?|(?:{item})(?:,(?:{item}))*")
}

/// [`is_schedule`] as a pattern.
pub(crate) fn schedule_pattern() -> String {
    let fields = CRON_FIELDS
        .iter()
        .map(|&(lo, hi)| format!("(?:{})", cron_field_pattern(lo, hi)))
        .collect::<Vec<_>>()
        .join(" ");
    format!("^(?:{}|{fields})$", CRON_NICKNAMES.join("|"))
}

/// The longest plan id.
pub(crate) const PLAN_ID_MAX_LEN: usize = 63;
/// The plan id that would shadow `GET /api/v1/plans/defaults`.
pub(crate) const RESERVED_PLAN_ID: &str = "defaults";

/// A plan id: `[a-z0-9][a-z0-9._-]{0,62}`, except `defaults`.
pub(crate) fn is_plan_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= PLAN_ID_MAX_LEN
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
        && id != RESERVED_PLAN_ID
}

/// [`is_plan_id`] as a pattern.
pub(crate) const PLAN_ID_PATTERN: &str = "^(?!defaults$)[a-z0-9][a-z0-9._-]{0,62}$";

/// The longest source.
pub(crate) const SOURCE_MAX_LEN: usize = 4096;

/// A source: an absolute path, or `agent:<agent name>:<absolute path>` with
/// the name of an agent token (`[A-Za-z0-9._-]{1,64}`); no NUL.
pub(crate) fn source_error(source: &str) -> Option<String> {
    if source.chars().count() > SOURCE_MAX_LEN {
        return Some(format!("at most {SOURCE_MAX_LEN} characters"));
    }
    if source.starts_with("pve:") {
        return vouch_events::sources::pve_source(source)
            .is_none()
            .then(|| {
                format!(
                    "{source:?}: expected pve:<cluster>/qemu/<vmid> or pve:<cluster>/lxc/<vmid> \
                 (cluster: 1-64 of A-Z a-z 0-9 . _ -; vmid: 100 to 999999999)"
                )
            });
    }
    let path = match source.strip_prefix("agent:") {
        Some(rest) => {
            let Some((name, path)) = rest.split_once(':') else {
                return Some("expected agent:<name>:<absolute path>".into());
            };
            let name_ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !name_ok {
                return Some(format!(
                    "the agent name {name:?} of agent:<name>:<path> must be 1-64 of A-Z a-z 0-9 . _ -"
                ));
            }
            path
        }
        None => source.strip_prefix("vzdump:").unwrap_or(source),
    };
    if !path.starts_with('/') {
        return Some(format!("{source:?}: the source must be an absolute path"));
    }
    if source.contains('\0') {
        return Some("the source must not contain NUL".into());
    }
    // Plain components: what the source names is what it spells, so the
    // administrator's source policy judges the path the backup walks.
    let inner = &path[1..];
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    if path != "/"
        && inner
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some(format!(
            "{source:?}: the source must be a plain path (no `.`, `..` or empty components)"
        ));
    }
    None
}

/// [`source_error`] (none) as a pattern: `/`, or plain components (not
/// empty, not `.` or `..`, no NUL) with an optional trailing `/`, bare or
/// after `agent:<name>:` or `vzdump:`; or `pve:<cluster>/<qemu|lxc>/<vmid>`.
pub(crate) const SOURCE_PATTERN: &str = r"^(?:pve:[A-Za-z0-9._-]{1,64}/(?:qemu|lxc)/[1-9][0-9]{2,8}|(?:agent:[A-Za-z0-9._-]{1,64}:|vzdump:)?/(?:(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)(?:/(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+))*/?)?)$";

/// A verification depth label: `structure`, `read-all` or `read-sample:N`
/// (N in 1..=100, no leading zeros).
pub(crate) const DEPTH_PATTERN: &str =
    "^(?:structure|read-all|read-sample:(?:[1-9]|[1-9][0-9]|100))$";

/// The longest repository id.
pub(crate) const REPOSITORY_MAX_LEN: usize = 255;

/// A point id: 64 lowercase hex digits.
pub(crate) const POINT_ID_PATTERN: &str = "^[0-9a-f]{64}$";

/// An absolute path inside a snapshot (no NUL).
pub(crate) const SNAPSHOT_PATH_PATTERN: &str = "^/[^\\x00]*$";

fn string(nullable: bool) -> ObjectBuilder {
    if nullable {
        ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::String, Type::Null]))
    } else {
        ObjectBuilder::new().schema_type(Type::String)
    }
}

/// A string schema with `pattern` and `max_length`.
pub(crate) fn pattern_schema(
    description: &str,
    pattern: &str,
    max_length: Option<usize>,
    nullable: bool,
) -> Object {
    string(nullable)
        .description(Some(description))
        .pattern(Some(pattern))
        .max_length(max_length)
        .build()
}

/// A duration field (see [`is_duration`]).
pub(crate) fn duration_schema(description: &str, nullable: bool) -> Object {
    pattern_schema(
        &format!(
            "{description} A duration: `<number><unit>` parts, optionally separated by one space \
             (`26h`, `1day 2h`, `1h30m`), not zero."
        ),
        &duration_pattern(),
        Some(DURATION_MAX_LEN),
        nullable,
    )
}

/// An RFC 3339 time.
pub(crate) fn date_time_schema(description: &str) -> Object {
    string(false)
        .description(Some(description))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
        .build()
}

/// A string query parameter taking one of `values`.
pub(crate) fn enum_schema(description: &str, values: &[&str]) -> Object {
    string(false)
        .description(Some(description))
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// A field taking one of `values`, or null.
pub(crate) fn nullable_enum_schema(description: &str, values: &[&str]) -> Object {
    let mut all: Vec<serde_json::Value> = values.iter().map(|v| (*v).into()).collect();
    all.push(serde_json::Value::Null);
    string(true)
        .description(Some(description))
        .enum_values(Some(all))
        .build()
}

/// An integer in `min..=max`.
pub(crate) fn integer_schema(description: &str, min: u64, max: u64, nullable: bool) -> Object {
    let t = if nullable {
        SchemaType::from_iter([Type::Integer, Type::Null])
    } else {
        SchemaType::Type(Type::Integer)
    };
    ObjectBuilder::new()
        .schema_type(t)
        .description(Some(description))
        .minimum(Some(min))
        .maximum(Some(max))
        .build()
}

/// A whole number in a query string (`5`; also `5.0`, as JSON Schema counts
/// an integral float as an integer).
fn query_whole(s: &str, min: u64, max: u64) -> Option<u64> {
    let v = s.parse::<u64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && f.fract() == 0.0 && *f >= 0.0 && *f <= max as f64)
            .map(|f| f as u64)
    })?;
    (min..=max).contains(&v).then_some(v)
}

/// The bounds of `limit`.
pub(crate) const LIMIT_MIN: u64 = 1;
/// The cap of `limit`.
pub(crate) const LIMIT_MAX: u64 = 1000;
/// The largest `from_seq`.
pub(crate) const SEQ_MAX: u64 = i64::MAX as u64;

/// `limit` of a query: 1 to 1000 (default 100).
pub(crate) fn query_limit<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<usize>, D::Error> {
    use serde::de::Error;
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => query_whole(&s, LIMIT_MIN, LIMIT_MAX)
            .and_then(|v| usize::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "limit {s:?} must be a number from {LIMIT_MIN} to {LIMIT_MAX}"
                ))
            }),
    }
}

/// `from_seq` of a query: 0 to 2^63-1 (0 and 1 both mean the first event).
pub(crate) fn query_seq<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => query_whole(&s, 0, SEQ_MAX).map(Some).ok_or_else(|| {
            D::Error::custom(format!(
                "from_seq {s:?} must be a number from 0 to {SEQ_MAX}"
            ))
        }),
    }
}

/// The schema of `limit`.
pub(crate) fn limit_schema() -> Object {
    integer_schema(
        "At most this many (default 100).",
        LIMIT_MIN,
        LIMIT_MAX,
        false,
    )
}

/// The schema of `from_seq`.
pub(crate) fn seq_schema() -> Object {
    integer_schema(
        "The first seq to return (default: the first event).",
        0,
        SEQ_MAX,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for ok in [
            "26h",
            "1day 2h",
            "7days",
            "30m",
            "1h30m",
            "0s 1ns",
            "999999999years",
            "1M",
            "1m",
        ] {
            assert!(is_duration(ok), "{ok}");
            assert!(
                humantime::parse_duration(ok).is_ok_and(|d| !d.is_zero()),
                "{ok}"
            );
        }
        for bad in [
            "",
            "0s",
            "0h 0m",
            "1",
            "h",
            "1h ",
            " 1h",
            "1h  2m",
            "01h",
            "1 h",
            "1.5h",
            "1µs",
            "1000000000s",
            "1hour2",
            "1x",
        ] {
            assert!(!is_duration(bad), "{bad}");
        }
        // What the API writes back is accepted as input.
        for d in [26 * 3600, 7 * 86_400, 86_400, 2_630_016 + 61] {
            let text = crate::views::human(std::time::Duration::from_secs(d));
            assert!(is_duration(&text), "{text}");
        }
    }

    #[test]
    fn schedules_the_grammar_accepts_croner_accepts() {
        let mut accepted = 0;
        for ok in [
            "0 2 * * *",
            "*/15 * * * *",
            "0 0-23/2 1,15 1-12 0-7",
            "59 23 31 12 7",
            "5-5 0 1 1 0",
            "0 9-17 * * 1-5",
            "@daily",
            "@annually",
        ] {
            assert!(is_schedule(ok), "{ok}");
            assert!(vouch_actors::Schedule::parse(ok).is_ok(), "{ok}");
            accepted += 1;
        }
        // Every field value, range and step the grammar allows, one field at a
        // time, parses with the engine's parser.
        for (i, &(lo, hi)) in CRON_FIELDS.iter().enumerate() {
            for a in lo..=hi {
                for b in a..=hi {
                    for item in [format!("{a}"), format!("{a}-{b}"), format!("{a}-{b}/7")] {
                        let mut fields = ["0", "0", "1", "1", "*"].map(String::from);
                        fields[i] = item;
                        let expr = fields.join(" ");
                        assert!(is_schedule(&expr), "{expr}");
                        assert!(vouch_actors::Schedule::parse(&expr).is_ok(), "{expr}");
                        accepted += 1;
                    }
                }
            }
        }
        assert!(accepted > 1000);
        for bad in [
            "",
            "0 2 * *",
            "0 2 * * * *",
            "0  2 * * *",
            " 0 2 * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 8",
            "5-3 * * * *",
            "*/0 * * * *",
            "00 * * * *",
            "1/5 * * * *",
            "* * * * MON",
            "* * L * *",
            "@reboot",
            "@DAILY",
            "1,,2 * * * *",
            "*,5 * * * *",
            "*/100 * * * *",
        ] {
            assert!(!is_schedule(bad), "{bad}");
        }
    }

    #[test]
    fn query_numbers() {
        assert_eq!(query_whole("5", 1, 1000), Some(5));
        assert_eq!(query_whole("5.0", 1, 1000), Some(5));
        assert_eq!(query_whole("1e3", 1, 1000), Some(1000));
        for bad in ["0", "1001", "-1", "5.5", "", "x", "NaN", "inf"] {
            assert_eq!(query_whole(bad, 1, 1000), None, "{bad}");
        }
    }

    #[test]
    fn number_patterns() {
        assert_eq!(number_pattern(0, 7), "[0-7]");
        assert_eq!(
            number_pattern(5, 59),
            "[5-9]|1[0-9]|2[0-9]|3[0-9]|4[0-9]|5[0-9]"
        );
        assert_eq!(number_pattern(23, 23), "23");
        assert_eq!(number_pattern(1, 12), "[1-9]|1[0-2]");
    }

    #[test]
    fn plan_ids_and_sources() {
        assert!(is_plan_id("home"));
        assert!(is_plan_id("0a.b_c-d"));
        assert!(!is_plan_id("defaults"));
        assert!(is_plan_id("defaults2"));
        assert!(!is_plan_id("Home"));
        assert!(!is_plan_id(&"a".repeat(64)));
        assert_eq!(source_error("/home"), None);
        assert_eq!(source_error("agent:web-1:/etc"), None);
        assert!(source_error("agent:web 1:/etc").is_some());
        assert!(source_error("agent::/etc").is_some());
        assert!(source_error("agent:x").is_some());
        assert!(source_error("relative").is_some());
        assert!(source_error("/a\0b").is_some());
        for bad in [
            "/a/../etc",
            "/a/./b",
            "/a//b",
            "//",
            "/..",
            "agent:w:/a/../b",
        ] {
            assert!(source_error(bad).is_some(), "{bad}");
        }
        for good in ["/", "/a/", "/.hidden/...", "/a..b/c.", "agent:w:/srv/"] {
            assert_eq!(source_error(good), None, "{good}");
        }
    }
}
