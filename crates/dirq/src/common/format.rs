//! Numbers as text: short labels every stage makes (a configuration's
//! name carries its rate), and the page's table cells.

/// 1234567 -> "1.23M", 0.25 -> "0.25": short tick labels.
pub fn compact_number(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e9 {
        (value / 1e9, "G")
    } else if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e3 {
        (value / 1e3, "K")
    } else {
        (value, "")
    };
    let text = if scaled == 0.0 {
        "0".to_string()
    } else if scaled.abs() >= 100.0 {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 10.0 {
        format!("{scaled:.1}")
    } else if scaled.abs() >= 0.01 {
        format!("{scaled:.2}")
    } else {
        format!("{scaled:.1e}")
    };
    let trimmed = if text.contains('.') && !text.contains('e') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{trimmed}{suffix}")
}

/// A latency in ns, in us: every latency the report shows is in us.
pub fn ns_to_us(ns: f64) -> f64 {
    ns / 1e3
}

/// Table cell for a measured or predicted number: three significant digits.
pub fn format_value(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".into();
    }
    let magnitude = value.abs();
    let text = if magnitude >= 1_000.0 {
        compact_number(value)
    } else if magnitude >= 100.0 || value == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    // A value that rounds to zero has no sign to show: "-0.00" reads as a loss.
    match text.strip_prefix('-') {
        Some(unsigned) if unsigned.chars().all(|c| c == '0' || c == '.') => unsigned.to_owned(),
        _ => text,
    }
}

pub fn format_percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_numbers() {
        assert_eq!(compact_number(0.0), "0");
        assert_eq!(compact_number(0.25), "0.25");
        assert_eq!(compact_number(1_500.0), "1.5K");
        assert_eq!(compact_number(28_000.0), "28K");
        assert_eq!(compact_number(2_340_000.0), "2.34M");
        assert_eq!(compact_number(-3_000.0), "-3K");
    }

    #[test]
    fn values_that_round_to_zero_lose_their_sign() {
        assert_eq!(format_value(-0.001), "0.00");
        assert_eq!(format_value(-0.0), "0");
        assert_eq!(format_value(-0.004), "0.00");
        assert_eq!(format_value(-0.006), "-0.01");
        assert_eq!(format_value(-12.5), "-12.5");
    }
}
