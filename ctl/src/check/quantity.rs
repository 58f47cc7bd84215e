//! Kubernetes resource quantities (`500m`, `1Gi`, `2`, `1e3`), read as
//! numbers so that a quota's room can be compared with tlc's limits.

/// The value of a quantity in its base unit (cores, bytes), or `None` if
/// it is not one.
pub(super) fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value * scale)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_the_suffixes_kubernetes_writes() {
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("1Gi"), Some(1073741824.0));
        assert_eq!(parse("64Mi"), Some(67108864.0));
        assert_eq!(parse("1G"), Some(1e9));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1.5k"), Some(1500.0));
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("1Xi"), None);
        assert_eq!(parse("lots"), None);
        assert_eq!(parse("-1"), None);
    }
}
