//! Table cells from the admin API's values: sizes, durations, ratios,
//! names. What is absent (`null`, or an answer tlcctl could not read)
//! shows as `-`.

use std::fmt::Display;

use tlc_admin_api::CodecView;

/// What a cell shows when there is nothing to show.
pub const NONE: &str = "-";

/// The value as it prints, `-` for none.
pub fn optional<T: Display>(value: Option<T>) -> String {
    value.map_or_else(|| NONE.to_string(), |v| v.to_string())
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

/// A byte count in binary units.
pub fn byte_count(n: u64) -> String {
    bytes(n as f64)
}

/// A rate in bytes per second.
pub fn rate(bytes_per_second: f64) -> String {
    format!("{}/s", bytes(bytes_per_second))
}

/// A link's rate in bits per second, as links are sold: `10.0 Mbit/s`.
pub fn link_rate(bytes_per_second: f64) -> String {
    const UNITS: [&str; 5] = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
    let mut scaled = bytes_per_second * 8.0;
    let mut unit = 0;
    while scaled >= 1000.0 && unit < UNITS.len() - 1 {
        scaled /= 1000.0;
        unit += 1;
    }
    format!("{scaled:.1} {}", UNITS[unit])
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

/// A compression ratio, `87.0x`; `-` when nothing was sent yet (0).
pub fn ratio(ratio: f64) -> String {
    if ratio.is_finite() && ratio > 0.0 {
        format!("{ratio:.1}x")
    } else {
        NONE.to_string()
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

/// [`significant`], `-` for none.
pub fn significant_or_none(x: Option<f64>) -> String {
    x.map_or_else(|| NONE.to_string(), significant)
}

/// A codec with its parameter, as `tlcctl codec` labels them: `3lc
/// s=1.75`, `topk k=5`, `fp16`.
pub fn codec(view: &CodecView) -> String {
    match (view.sparsity, view.k) {
        (Some(s), _) => format!("{} s={s:.2}", view.codec),
        (None, Some(k)) => format!("{} k={k}", view.codec),
        (None, None) => view.codec.clone(),
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

    #[test]
    fn sizes() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1023.0), "1023 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(byte_count(251_658_240), "240.0 MiB");
        assert_eq!(rate(2_893_212.0), "2.8 MiB/s");
    }

    #[test]
    fn link_rates() {
        assert_eq!(link_rate(1.25e6), "10.0 Mbit/s");
        assert_eq!(link_rate(125e6), "1.0 Gbit/s");
        assert_eq!(link_rate(3.0), "24.0 bit/s");
        assert_eq!(link_rate(5e15), "40000.0 Tbit/s");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(81.5), "1m21s");
        assert_eq!(duration(7380.0), "2h03m");
        assert_eq!(duration(3.0 * 86400.0 + 4.0 * 3600.0), "3d04h");
        assert_eq!(duration(-1.0), "-");
    }

    #[test]
    fn ratios_and_codecs() {
        assert_eq!(ratio(12.5), "12.5x");
        assert_eq!(ratio(58.52), "58.5x");
        assert_eq!(ratio(0.0), "-");
        let view = |codec: &str, sparsity, k| CodecView {
            codec: codec.into(),
            sparsity,
            k,
        };
        assert_eq!(codec(&view("3lc", Some(1.0), None)), "3lc s=1.00");
        // tlcd sends k as a float (5.0): shown as typed.
        assert_eq!(codec(&view("topk", None, Some(5.0))), "topk k=5");
        assert_eq!(codec(&view("topk", None, Some(2.5))), "topk k=2.5");
        assert_eq!(codec(&view("fp16", None, None)), "fp16");
    }

    #[test]
    fn floats() {
        assert_eq!(significant(0.731), "0.731");
        assert_eq!(significant(0.0123), "0.0123");
        assert_eq!(significant(1.23e-5), "1.23e-5");
        assert_eq!(significant(4567.0), "4567");
        assert_eq!(significant_or_none(None), "-");
        assert_eq!(optional(Some(3)), "3");
        assert_eq!(optional(None::<u64>), "-");
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
