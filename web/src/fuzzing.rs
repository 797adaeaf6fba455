//! Entry points into the parsers of API input, for the stable fuzz harness
//! (`tests/fuzz_parsers.rs`, built with the `fuzzing` feature). Each takes
//! arbitrary bytes, runs them through what the server runs on a request,
//! and panics when an invariant breaks; a parse that is merely refused is
//! no finding. Not an API: hidden, and only in test builds.

use actix_web::web::Query;
use regex_lite::Regex;

use crate::api::grammar;
use crate::validate::{self, PlanInput};

/// A JSON body as the routes take it: an object, else refused (400).
fn object(bytes: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    serde_json::from_slice(bytes).ok()
}

/// `POST /api/v1/plans` and `PUT /api/v1/plans/{id}` bodies: read as a
/// [`PlanInput`], then validated into a definition as the routes do. An
/// accepted definition must satisfy the grammars the OpenAPI document
/// promises, and read back as input it must give the same definition.
pub fn plan_body(bytes: &[u8]) {
    let Some(map) = object(bytes) else { return };
    let Ok(input) = validate::body::<PlanInput>(map) else {
        return;
    };
    for path_id in [None, Some("fuzzed")] {
        let Ok((id, def)) =
            validate::definition(input.clone(), validate::default_definition(), path_id)
        else {
            continue;
        };
        assert!(grammar::is_plan_id(&id), "accepted plan id {id:?}");
        assert!(
            grammar::source_error(&def.source).is_none(),
            "accepted source {:?}",
            def.source
        );
        // What the server shows is what it took: the definition read back
        // as input validates to itself.
        let mut again = validate::input_of(&def);
        again.id = Some(id.clone());
        let (id2, def2) = validate::definition(again, validate::default_definition(), None)
            .unwrap_or_else(|e| panic!("the accepted plan {id:?} does not read back: {e}"));
        assert_eq!(id2, id);
        assert_eq!(def2, def, "plan {id:?} changed on reading back");
    }
}

/// `POST /api/v1/points/{id}/lock` bodies.
pub fn lock_body(bytes: &[u8]) {
    let Some(map) = object(bytes) else { return };
    if let Ok(lock) = validate::body::<crate::views::LockRequest>(map) {
        let _ = crate::api::points::parse_until(&lock.until);
    }
}

/// `POST /api/v1/repositories/{id}/verify-reports` bodies: read and
/// checked (point ids, depths, damaged packs, counters) as the route does.
pub fn verify_report_body(bytes: &[u8]) {
    let Some(map) = object(bytes) else { return };
    crate::api::verify_reports::check_body(map);
}

/// Query strings of every route that takes one.
pub fn query(bytes: &[u8]) {
    let Ok(q) = std::str::from_utf8(bytes) else {
        return;
    };
    let _ = Query::<crate::api::events::EventsQuery>::from_query(q);
    let _ = Query::<crate::api::events::StreamQuery>::from_query(q);
    let _ = Query::<crate::api::jobs::JobsQuery>::from_query(q);
    let _ = Query::<crate::api::misc::AlertsQuery>::from_query(q);
    let _ = Query::<crate::api::points::PointsQuery>::from_query(q);
    let _ = Query::<crate::api::points::PathQuery>::from_query(q);
    let _ = Query::<crate::api::points::FilesQuery>::from_query(q);
}

/// The grammars and their patterns, compared: each hand-written check must
/// accept exactly the strings its OpenAPI pattern (and length bound)
/// matches, and every accepted string must be one the engine parses.
pub struct Grammars {
    duration: Regex,
    schedule: Regex,
    plan_id: Regex,
    source: Regex,
    depth: Regex,
}

impl Default for Grammars {
    fn default() -> Self {
        Self::new()
    }
}

impl Grammars {
    /// The patterns, compiled once.
    pub fn new() -> Self {
        let re = |p: &str| Regex::new(p).unwrap_or_else(|e| panic!("pattern {p}: {e}"));
        // The plan id's pattern rules out `defaults` with a lookahead,
        // which regex-lite lacks; the rest of it is compared.
        let plan_id = grammar::PLAN_ID_PATTERN.replace("(?!defaults$)", "");
        Grammars {
            duration: re(&grammar::duration_pattern()),
            schedule: re(&grammar::schedule_pattern()),
            plan_id: re(&plan_id),
            source: re(grammar::SOURCE_PATTERN),
            depth: re(grammar::DEPTH_PATTERN),
        }
    }

    /// Compares every grammar on `bytes` (as UTF-8, lossily).
    pub fn check(&self, bytes: &[u8]) {
        let s = String::from_utf8_lossy(bytes);
        let s = s.as_ref();
        let chars = s.chars().count();

        let duration = grammar::is_duration(s);
        assert_eq!(
            duration,
            self.duration.is_match(s) && chars <= grammar::DURATION_MAX_LEN,
            "duration {s:?}"
        );
        if duration {
            let d = humantime::parse_duration(s)
                .unwrap_or_else(|e| panic!("accepted duration {s:?} does not parse: {e}"));
            assert!(!d.is_zero(), "accepted duration {s:?} is zero");
        }

        let schedule = grammar::is_schedule(s);
        assert_eq!(
            schedule,
            self.schedule.is_match(s) && chars <= grammar::SCHEDULE_MAX_LEN,
            "schedule {s:?}"
        );
        if schedule {
            if let Err(e) = vouch_actors::Schedule::parse(s) {
                panic!("accepted schedule {s:?} does not parse: {e}");
            }
        }

        assert_eq!(
            grammar::is_plan_id(s),
            self.plan_id.is_match(s) && s != grammar::RESERVED_PLAN_ID,
            "plan id {s:?}"
        );
        assert_eq!(
            grammar::source_error(s).is_none(),
            self.source.is_match(s) && chars <= grammar::SOURCE_MAX_LEN,
            "source {s:?}"
        );
        assert_eq!(
            validate::parse_depth(s).is_ok(),
            self.depth.is_match(s),
            "depth {s:?}"
        );
    }
}
