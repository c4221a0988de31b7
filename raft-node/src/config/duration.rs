//! Durations in Go's syntax, as etcd's duration flags take them.

use std::time::Duration;

/// A duration as Go's `time.ParseDuration` reads it (etcd's duration flags): a sequence of decimal numbers
/// each with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), like `10m`, `1.5s`, `1h30m`; `0` alone is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?}");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("missing unit in duration {text:?}")),
            _ => return Err(format!("unknown unit {unit:?} in duration {text:?}")),
        };
        nanos += value * scale;
        rest = tail;
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_in_go() {
        let ok = [
            ("10m", Duration::from_secs(600)),
            ("5s", Duration::from_secs(5)),
            ("100ms", Duration::from_millis(100)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            ("300us", Duration::from_micros(300)),
            ("2\u{b5}s", Duration::from_micros(2)),
            ("0", Duration::ZERO),
            ("+7ns", Duration::from_nanos(7)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "10", "5x", "s", "-1s", "1.2.3s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
