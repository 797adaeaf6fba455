//! The web console: static assets from `web/console/`, embedded in the
//! binary at compile time and served without authentication.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | `index.html` |
//! | `GET /console/{file}` | one asset, or 404 |
//!
//! The file names are not fingerprinted, so every asset is sent with
//! `Cache-Control: no-cache` and a strong `ETag` (the BLAKE3 hash of its
//! bytes): the browser keeps its copy and revalidates it with one cheap
//! `If-None-Match` request, answered `304 Not Modified`, and a new binary is
//! never shadowed by a stale cache. A `Content-Security-Policy` keeps the
//! page to its own origin (no inline script, no third-party anything).
//!
//! The console itself speaks only the public `/api/v1` with the bearer
//! token the user typed in; these routes hand out code, never data.

use std::sync::OnceLock;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse};

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

macro_rules! asset {
    ($name:literal, $ty:expr) => {
        Asset {
            name: $name,
            content_type: $ty,
            bytes: include_bytes!(concat!("../console/", $name)),
        }
    };
}

/// Every file of the console. A file added to `web/console/` must be
/// listed here (the unit tests check that every module a page imports is).
const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("util.js", JS),
    asset!("signin.js", JS),
    asset!("overview.js", JS),
    asset!("plans.js", JS),
    asset!("points.js", JS),
    asset!("point.js", JS),
    asset!("jobs.js", JS),
    asset!("agents.js", JS),
    asset!("alerts.js", JS),
    asset!("security.js", JS),
    asset!("events.js", JS),
    asset!("charts.js", JS),
    asset!("reports.js", JS),
];

/// The page's policy: everything from its own origin, nothing inline but
/// the `data:` favicon, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; object-src 'none'; \
                   base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The strong ETags of [`ASSETS`], in the same order, computed once.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| format!("\"{}\"", &blake3::hash(a.bytes).to_hex()[..32]))
            .collect()
    })
}

/// Routes `GET /` and `GET /console/{file}` (no authentication).
pub fn configure_console(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(index))
        .route("/console/{file}", web::get().to(file));
}

async fn index(req: HttpRequest) -> HttpResponse {
    respond(&req, "index.html")
}

async fn file(req: HttpRequest, name: web::Path<String>) -> HttpResponse {
    respond(&req, &name)
}

fn respond(req: &HttpRequest, name: &str) -> HttpResponse {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        return HttpResponse::NotFound()
            .content_type("application/json")
            .body(r#"{"code":"not_found","message":"no such console file"}"#);
    };
    let asset = &ASSETS[i];
    let etag = &etags()[i];
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut res = if fresh {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    res.insert_header((header::ETAG, etag.as_str()))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"));
    if asset.name.ends_with(".html") {
        res.insert_header((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"));
    }
    if fresh {
        return res.finish();
    }
    res.content_type(asset.content_type).body(asset.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::StatusCode;
    use actix_web::test::{call_service, init_service, read_body, TestRequest};
    use actix_web::App;

    fn text(a: &Asset) -> &'static str {
        std::str::from_utf8(a.bytes).unwrap_or_else(|e| panic!("{} is not UTF-8: {e}", a.name))
    }

    #[actix_web::test]
    async fn every_asset_is_served_with_its_type_and_revalidates() {
        let app = init_service(App::new().configure(configure_console)).await;
        for asset in ASSETS {
            let uri = format!("/console/{}", asset.name);
            let res = call_service(&app, TestRequest::get().uri(&uri).to_request()).await;
            assert_eq!(res.status(), StatusCode::OK, "{uri}");
            let h = res.headers();
            assert_eq!(
                h.get(header::CONTENT_TYPE).unwrap(),
                asset.content_type,
                "{uri}"
            );
            assert_eq!(h.get(header::CACHE_CONTROL).unwrap(), "no-cache", "{uri}");
            let etag = h.get(header::ETAG).unwrap().clone();
            let body = read_body(res).await;
            assert_eq!(&body[..], asset.bytes, "{uri}");

            let again = TestRequest::get()
                .uri(&uri)
                .insert_header((header::IF_NONE_MATCH, etag))
                .to_request();
            let res = call_service(&app, again).await;
            assert_eq!(res.status(), StatusCode::NOT_MODIFIED, "{uri}");
        }
        let res = call_service(&app, TestRequest::get().uri("/").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers().get(header::CONTENT_TYPE).unwrap(), HTML);
        assert!(res.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        assert_eq!(&read_body(res).await[..], ASSETS[0].bytes);

        for missing in ["/console/nope.js", "/console/..%2FCargo.toml", "/console/"] {
            let res = call_service(&app, TestRequest::get().uri(missing).to_request()).await;
            assert_eq!(res.status(), StatusCode::NOT_FOUND, "{missing}");
        }
    }

    #[test]
    fn no_asset_reaches_outside_the_pages_origin() {
        for asset in ASSETS {
            let body = text(asset).to_ascii_lowercase();
            for scheme in ["http://", "https://", "//fonts.", "@import url("] {
                assert!(
                    !body.contains(scheme),
                    "{} refers to {scheme}...: the console must not load anything from elsewhere",
                    asset.name
                );
            }
        }
    }

    #[test]
    fn every_imported_module_and_linked_file_is_embedded() {
        for asset in ASSETS {
            let body = text(asset);
            // `from './x.js'`, `import('./x.js')`, `href="/console/x"`, `src="/console/x"`.
            let mut refs = Vec::new();
            for (i, _) in body.match_indices("./") {
                let rest = &body[i + 2..];
                if let Some(end) = rest.find(['\'', '"']) {
                    if rest[..end].ends_with(".js") {
                        refs.push(&rest[..end]);
                    }
                }
            }
            for (i, _) in body.match_indices("/console/") {
                let rest = &body[i + 9..];
                if let Some(end) = rest.find(['\'', '"']) {
                    refs.push(&rest[..end]);
                }
            }
            for r in refs {
                assert!(
                    ASSETS.iter().any(|a| a.name == r),
                    "{} refers to {r}, which is not embedded",
                    asset.name
                );
            }
        }
    }
}
