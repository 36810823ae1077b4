//! What authentication adds to one request (issue 17): an HTTP request's credential check
//! (`Authorization: Bearer <token>` → the token's digest, lookup, constant-time compare) and
//! its admission (the token still valid, the throttled look at the token file), with
//! `auth = required`, against the same calls with `auth = disabled` (which answers the local
//! caller at once). A cached hit costs ~0.1 ms end to end (BENCHMARKS.md), so the difference
//! here is its share of that.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use quiver_auth::{AuthMode, AuthSettings, Authenticator, TokenStore};

fn authenticator(mode: AuthMode, dir: &std::path::Path) -> (Authenticator, String) {
    let tokens = TokenStore::open(dir).unwrap();
    let secret = tokens.create("bench", true, &[]).unwrap().secret;
    let settings = AuthSettings {
        auth: mode,
        ..AuthSettings::default()
    };
    (Authenticator::new(settings, Arc::new(tokens)), secret)
}

fn bench_request_check(c: &mut Criterion) {
    let peer = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
    let mut group = c.benchmark_group("authenticate_and_admit");
    for (label, mode) in [
        ("auth=disabled", AuthMode::Disabled),
        ("auth=required", AuthMode::Required),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (auth, secret) = authenticator(mode, dir.path());
        let header = format!("Bearer {secret}");
        group.bench_function(label, |b| {
            b.iter(|| {
                let caller = auth
                    .authenticate_header(Some(black_box(header.as_bytes())), peer)
                    .unwrap();
                auth.admit_request(&caller).unwrap();
                caller
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_request_check);
criterion_main!(benches);
