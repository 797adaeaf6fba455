//! Prometheus metrics: every metric name of the service lives here.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::error::WebError;

/// `vouch_build_info{version}`: always 1; the labels carry the build.
pub const BUILD_INFO: &str = "vouch_build_info";
/// `vouch_http_requests_total{route,status}`: HTTP requests answered, by
/// route pattern (never the raw path, so ids do not explode the series)
/// and status code.
pub const HTTP_REQUESTS_TOTAL: &str = "vouch_http_requests_total";
/// The `route` label of a request that matched no route.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The service's metrics and the registry they are exposed from.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
}

impl Metrics {
    /// Registers every metric in a fresh registry; `version` goes into
    /// [`BUILD_INFO`].
    pub fn new(version: &str) -> Result<Self, WebError> {
        let registry = Registry::new();
        let build_info = IntGaugeVec::new(
            Opts::new(BUILD_INFO, "Build of the running Vouch service (always 1)."),
            &["version"],
        )?;
        build_info.with_label_values(&[version]).set(1);
        registry.register(Box::new(build_info))?;
        let http_requests = IntCounterVec::new(
            Opts::new(
                HTTP_REQUESTS_TOTAL,
                "HTTP requests answered, by route pattern and status code.",
            ),
            &["route", "status"],
        )?;
        registry.register(Box::new(http_requests.clone()))?;
        Ok(Metrics {
            registry,
            http_requests,
        })
    }

    /// The registry, for other parts of the service to register their own
    /// metrics in (their names belong in this module too).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one answered request.
    pub fn observe_request(&self, route: &str, status: u16) {
        self.http_requests
            .with_label_values(&[route, &status.to_string()])
            .inc();
    }

    /// Everything registered, in the Prometheus text exposition format.
    pub fn render(&self) -> Result<String, WebError> {
        Ok(TextEncoder::new().encode_to_string(&self.registry.gather())?)
    }
}

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_build_info_and_request_counts() {
        let m = match Metrics::new("1.2.3") {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        m.observe_request("/healthz", 200);
        m.observe_request("/healthz", 200);
        m.observe_request(UNMATCHED_ROUTE, 404);
        let text = m.render().unwrap_or_default();
        assert!(text.contains("# TYPE vouch_build_info gauge"), "{text}");
        assert!(
            text.contains("vouch_build_info{version=\"1.2.3\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE vouch_http_requests_total counter"),
            "{text}"
        );
        assert!(
            text.contains("vouch_http_requests_total{route=\"/healthz\",status=\"200\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("vouch_http_requests_total{route=\"unmatched\",status=\"404\"} 1"),
            "{text}"
        );
    }
}
