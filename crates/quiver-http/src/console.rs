//! The web console: `GET /` and `GET /console/<file>` serve the console's page, scripts (native
//! ES modules, `main.js` the entry), style and its vendored libraries (uPlot for charts, Apache
//! Arrow's JavaScript reader for answers), embedded in the binary at build time
//! (`crates/quiver-http/console/`): no network, no CDN, no bundler, no build step.
//!
//! The assets hold no data and need no token: the console calls the same HTTP API as every
//! client, with the token its user typed (kept for the browser tab only). Each asset carries an
//! `ETag` (a hash of its bytes) and `Cache-Control: no-cache`, so a browser revalidates and an
//! upgraded server is never shown with an old script; a strict `Content-Security-Policy` lets
//! the page load nothing but its own assets and talk to nothing but this server.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One embedded file of the console.
struct Asset {
    /// Its name under `/console/` (the page itself is `index.html`, served at `/`).
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// An [`Asset`] of `console/<name>`, embedded.
macro_rules! asset {
    ($name:literal, $content_type:literal) => {
        Asset {
            name: $name,
            content_type: $content_type,
            bytes: include_bytes!(concat!("../console/", $name)),
        }
    };
}

/// Every file the console is made of (each module a script imports must be here: a missing one
/// fails the whole page).
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("main.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("state.js", "text/javascript; charset=utf-8"),
    asset!("login.js", "text/javascript; charset=utf-8"),
    asset!("databases.js", "text/javascript; charset=utf-8"),
    asset!("pages/query.js", "text/javascript; charset=utf-8"),
    asset!("pages/server.js", "text/javascript; charset=utf-8"),
    asset!("pages/upload.js", "text/javascript; charset=utf-8"),
    asset!("cells.js", "text/javascript; charset=utf-8"),
    asset!("charts.js", "text/javascript; charset=utf-8"),
    asset!("csv.js", "text/javascript; charset=utf-8"),
    asset!("arrow-encode.js", "text/javascript; charset=utf-8"),
    asset!("time.js", "text/javascript; charset=utf-8"),
    asset!("dom.js", "text/javascript; charset=utf-8"),
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("vendor/uplot.min.js", "text/javascript; charset=utf-8"),
    asset!("vendor/uplot.min.css", "text/css; charset=utf-8"),
    asset!("vendor/arrow.min.js", "text/javascript; charset=utf-8"),
    asset!("vendor/LICENSES.txt", "text/plain; charset=utf-8"),
];

/// What the console's page may load and reach: its own assets and this server's API; inline
/// styles only (uPlot sizes its elements through `style`), never inline or remote scripts.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; \
     object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// `GET /`: the console's page.
pub async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /console/{*file}`: one of the console's files; 404 for any other name.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    serve(&file, &headers)
}

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some((index, asset)) = ASSETS.iter().enumerate().find(|(_, a)| a.name == name) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("the console has no file {name:?}"),
        )
            .into_response();
    };
    let etag = &etags()[index];
    let cached = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim())
        // a proxy that compresses marks the tag weak: the bytes are still these
        .map(|tag| tag.strip_prefix("W/").unwrap_or(tag))
        .any(|tag| tag == etag || tag == "*");
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::ETAG,
            HeaderValue::from_str(etag).expect("an ETag is ASCII"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
    ];
    if cached {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (StatusCode::OK, headers, asset.bytes).into_response()
}

/// The ETag of each asset, in [`ASSETS`] order: a 64-bit FNV-1a hash of its bytes, quoted.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|asset| format!("\"{:016x}\"", fnv1a(asset.bytes)))
            .collect()
    })
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_embedded_and_named_once() {
        for asset in ASSETS {
            assert!(!asset.bytes.is_empty(), "{} is empty", asset.name);
            let named = ASSETS.iter().filter(|a| a.name == asset.name).count();
            assert_eq!(named, 1, "{} is listed {named} times", asset.name);
        }
    }

    #[test]
    fn etags_differ_between_assets_and_follow_the_bytes() {
        let tags = etags();
        let mut unique = tags.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ASSETS.len());
        assert_ne!(fnv1a(b"console"), fnv1a(b"consolf"));
    }

    #[test]
    fn the_page_names_only_embedded_scripts_and_styles() {
        let page = std::str::from_utf8(ASSETS[0].bytes).expect("the page is UTF-8");
        for reference in page
            .split(['"', '\''])
            .filter(|s| s.starts_with("/console/"))
        {
            let name = &reference["/console/".len()..];
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "index.html loads {reference}, which is not embedded"
            );
        }
        assert!(!page.contains("http://") && !page.contains("https://"));
    }

    /// The console's scripts are ES modules the browser loads one by one: a module that
    /// imports a file missing from [`ASSETS`] gets a 404 and the whole page stays dead.
    #[test]
    fn every_module_a_script_imports_is_embedded() {
        let scripts = ASSETS
            .iter()
            .filter(|a| a.name.ends_with(".js") && !a.name.starts_with("vendor/"));
        let mut imports = 0;
        for script in scripts {
            let text = std::str::from_utf8(script.bytes).expect("a script is UTF-8");
            let dir = script.name.rsplit_once('/').map_or("", |(dir, _)| dir);
            // `import … from '…';` on one line, or the `} from '…';` closing a longer one
            for line in text.lines().filter(|l| {
                (l.starts_with("import ") || l.starts_with("} from ") || l.starts_with("export "))
                    && l.contains(" from ")
            }) {
                let specifier = line
                    .rsplit(['\'', '"'])
                    .nth(1)
                    .unwrap_or_else(|| panic!("{}: no module named in {line:?}", script.name));
                assert!(
                    specifier.starts_with("./") || specifier.starts_with("../"),
                    "{}: {specifier:?} is not a relative path (no import map, no bundler)",
                    script.name
                );
                let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
                for part in specifier.split('/') {
                    match part {
                        "." => {}
                        ".." => assert!(
                            parts.pop().is_some(),
                            "{}: {specifier:?} leaves /console/",
                            script.name
                        ),
                        name => parts.push(name),
                    }
                }
                let name = parts.join("/");
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "{} imports {specifier:?} ({name}), which is not embedded",
                    script.name
                );
                imports += 1;
            }
        }
        assert!(imports > 0, "the console's entry imports its modules");
    }
}
