//! Tests of [`super`]: number formats and the exposition of a member's metrics.

use std::time::Duration;

use super::*;
use crate::exposition::go_float;

#[test]
fn floats_print_as_go_prints_them() {
    let cases = [
        (0.0, "0"),
        (1.0, "1"),
        (20480.0, "20480"),
        (2_147_483_648.0, "2.147483648e+09"),
        (1_000_000.0, "1e+06"),
        (999_999.0, "999999"),
        (0.0034729739999999998, "0.0034729739999999998"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (f64::INFINITY, "+Inf"),
    ];
    for (value, want) in cases {
        assert_eq!(go_float(value), want, "{value}");
    }
}

#[test]
fn exponential_buckets_match_etcds_bounds() {
    // The bounds as written, `+Inf` last.
    let bounds = |h: &Histogram| -> Vec<String> { h.cumulative().0.iter().map(|(b, _)| go_float(*b)).collect() };
    let rtt = bounds(&Histogram::seconds(0.0001, 2.0, 16));
    assert_eq!(rtt.first().map(String::as_str), Some("0.0001"));
    assert_eq!(rtt[rtt.len() - 2], "3.2768");
    let fsync = bounds(&Histogram::seconds(0.001, 2.0, 14));
    assert_eq!((fsync[fsync.len() - 2].as_str(), fsync.last().map(String::as_str)), ("8.192", Some("+Inf")));
}

#[test]
fn histogram_buckets_are_cumulative() {
    let h = Histogram::seconds(0.25, 2.0, 3);
    for ms in [0, 250, 750, 4000] {
        h.observe(Duration::from_millis(ms));
    }
    let mut out = Exposition::default();
    out.histograms("h", "help", &[(&[("To", "a")], &h)]);
    let text = out.finish();
    let want = "# HELP h help\n# TYPE h histogram\n\
        h_bucket{To=\"a\",le=\"0.25\"} 2\nh_bucket{To=\"a\",le=\"0.5\"} 2\nh_bucket{To=\"a\",le=\"1\"} 3\n\
        h_bucket{To=\"a\",le=\"+Inf\"} 4\nh_sum{To=\"a\"} 5\nh_count{To=\"a\"} 4\n";
    assert_eq!(text, want);
}

#[test]
fn cluster_version_is_major_and_minor() {
    assert_eq!(major_minor("3.4.23"), "3.4");
    assert_eq!(major_minor("3.5"), "3.5");
}
