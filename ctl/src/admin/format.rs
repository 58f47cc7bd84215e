//! Table cells from JSON values: sizes, durations, ratios, names.
//!
//! Every reader here takes a `serde_json::Value` and a JSON pointer and
//! shows `-` for what is missing or of the wrong type, so a field the
//! daemon does not send (an older or newer tlcd) blanks one cell instead of
//! failing the command.

use serde_json::Value;

/// What a cell shows when there is nothing to show.
pub const NONE: &str = "-";

/// The number at `pointer`, if it is one.
pub fn number(value: &Value, pointer: &str) -> Option<f64> {
    value.pointer(pointer).and_then(Value::as_f64)
}

/// The text at `pointer`, if it is a string.
pub fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// A string as is, anything else as compact JSON, `-` for missing/null.
pub fn cell(value: &Value, pointer: &str) -> String {
    match value.pointer(pointer) {
        None | Some(Value::Null) => NONE.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A count, `-` if missing.
pub fn count(value: &Value, pointer: &str) -> String {
    match value.pointer(pointer) {
        Some(Value::Number(n)) => n.to_string(),
        _ => NONE.to_string(),
    }
}

/// Bytes with binary units: `512 B`, `1.5 KiB`, `240.0 MiB`.
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if !n.is_finite() {
        return NONE.to_string();
    }
    if n.abs() < 1024.0 {
        return format!("{n:.0} B");
    }
    let mut scaled = n / 1024.0;
    let mut unit = 0;
    while scaled.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    format!("{scaled:.1} {}", UNITS[unit])
}

/// The byte count at `pointer` in binary units, `-` if missing.
pub fn bytes_at(value: &Value, pointer: &str) -> String {
    number(value, pointer).map_or_else(|| NONE.to_string(), bytes)
}

/// A rate in bytes per second.
pub fn rate(bytes_per_second: f64) -> String {
    format!("{}/s", bytes(bytes_per_second))
}

/// An uptime or idle time: `45s`, `1m21s`, `2h03m`, `3d04h`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return NONE.to_string();
    }
    let s = seconds as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// The duration at `pointer` via [`duration`], `-` if missing.
pub fn duration_at(value: &Value, pointer: &str) -> String {
    number(value, pointer).map_or_else(|| NONE.to_string(), duration)
}

/// `yes` or `no` for the boolean at `pointer`, `-` if it is not one.
pub fn boolean<'a>(value: &Value, pointer: &str, yes: &'a str, no: &'a str) -> &'a str {
    match value.pointer(pointer).and_then(Value::as_bool) {
        Some(true) => yes,
        Some(false) => no,
        None => NONE,
    }
}

/// A compression ratio, `87.0x`: the daemon's `ratio` at `pointer`/ratio,
/// else raw over wire bytes; `-` when nothing was sent yet.
pub fn ratio(value: &Value, pointer: &str) -> String {
    let given = number(value, &format!("{pointer}/ratio"));
    let computed = || {
        let raw = number(value, &format!("{pointer}/raw_bytes"))?;
        let wire = number(value, &format!("{pointer}/wire_bytes"))?;
        (wire > 0.0).then(|| raw / wire)
    };
    match given.or_else(computed) {
        Some(r) if r.is_finite() && r > 0.0 => format!("{r:.1}x"),
        _ => NONE.to_string(),
    }
}

/// A float with about three significant digits: `0.731`, `0.0123`,
/// `1.23e-5`, `4567`.
pub fn significant(x: f64) -> String {
    if !x.is_finite() {
        return NONE.to_string();
    }
    if x == 0.0 {
        return "0".to_string();
    }
    let magnitude = x.abs().log10().floor() as i32;
    if !(-3..6).contains(&magnitude) {
        return format!("{x:.2e}");
    }
    let decimals = (2 - magnitude).max(0) as usize;
    format!("{x:.decimals$}")
}

/// The float at `pointer` via [`significant`], `-` if missing or null.
pub fn significant_at(value: &Value, pointer: &str) -> String {
    number(value, pointer).map_or_else(|| NONE.to_string(), significant)
}

/// A codec with its parameter, as `tlcctl codec` labels them: `3lc
/// s=1.75`, `topk k=5`, `fp16`.
pub fn codec(value: &Value, pointer: &str) -> String {
    let Some(name) = text(value, &format!("{pointer}/codec")) else {
        return NONE.to_string();
    };
    if let Some(s) = number(value, &format!("{pointer}/sparsity")) {
        format!("{name} s={s:.2}")
    } else if let Some(k) = value
        .pointer(&format!("{pointer}/k"))
        .filter(|k| k.is_number())
    {
        format!("{name} k={k}")
    } else {
        name.to_string()
    }
}

/// Shortens `name` to `max` characters by cutting out its middle, where a
/// TensorFlow name is least telling (`gradients/dense/…/MatMul_1`).
pub fn truncate_middle(name: &str, max: usize) -> String {
    let len = name.chars().count();
    if len <= max || max < 5 {
        return name.to_string();
    }
    let head = (max - 1) / 3;
    let tail = max - 1 - head;
    let start: String = name.chars().take(head).collect();
    let end: String = name.chars().skip(len - tail).collect();
    format!("{start}…{end}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1023.0), "1023 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(251_658_240.0), "240.0 MiB");
        assert_eq!(rate(2_893_212.0), "2.8 MiB/s");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(81.5), "1m21s");
        assert_eq!(duration(7380.0), "2h03m");
        assert_eq!(duration(3.0 * 86400.0 + 4.0 * 3600.0), "3d04h");
        assert_eq!(duration(-1.0), "-");
        assert_eq!(duration_at(&json!({"up": 81.5}), "/up"), "1m21s");
        assert_eq!(duration_at(&json!({"up": "long"}), "/up"), "-");
    }

    #[test]
    fn booleans() {
        let v = json!({"t": true, "f": false, "s": "yes"});
        assert_eq!(boolean(&v, "/t", "yes", "no"), "yes");
        assert_eq!(boolean(&v, "/f", "yes", "no"), "no");
        assert_eq!(boolean(&v, "/s", "yes", "no"), "-");
    }

    #[test]
    fn ratios_and_codecs() {
        let v = json!({"push": {"raw_bytes": 100, "wire_bytes": 8}, "pull": {"ratio": 58.52},
                       "p": {"codec": "3lc", "sparsity": 1.0}, "q": {"codec": "topk", "k": 5}});
        assert_eq!(ratio(&v, "/push"), "12.5x");
        assert_eq!(ratio(&v, "/pull"), "58.5x");
        assert_eq!(ratio(&v, "/none"), "-");
        assert_eq!(codec(&v, "/p"), "3lc s=1.00");
        assert_eq!(codec(&v, "/q"), "topk k=5");
        assert_eq!(codec(&v, "/none"), "-");
    }

    #[test]
    fn floats() {
        assert_eq!(significant(0.731), "0.731");
        assert_eq!(significant(0.0123), "0.0123");
        assert_eq!(significant(1.23e-5), "1.23e-5");
        assert_eq!(significant(4567.0), "4567");
    }

    #[test]
    fn truncation() {
        let name = "gradients/dense/MatMul_grad/MatMul_1";
        assert_eq!(truncate_middle(name, 100), name);
        let short = truncate_middle(name, 16);
        assert_eq!(short.chars().count(), 16);
        assert_eq!(short, "gradi…d/MatMul_1");
    }
}
