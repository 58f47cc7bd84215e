//! Plain-text tables with aligned columns.

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// The columns of a table whose text columns, aligned left, come before
/// its number columns, aligned right.
pub fn columns<'a>(text: &[&'a str], numbers: &[&'a str]) -> Vec<(&'a str, Align)> {
    let left = text.iter().map(|name| (*name, Align::Left));
    let right = numbers.iter().map(|name| (*name, Align::Right));
    left.chain(right).collect()
}

/// Renders a header and rows, two spaces between columns, no trailing spaces.
pub fn render(columns: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|(name, _)| name.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = columns.iter().map(|(name, _)| name.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, ((cell, width), (_, align))) in row.iter().zip(&widths).zip(columns).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = width.saturating_sub(cell.chars().count());
            match align {
                Align::Left => {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns() {
        let text = render(
            &[("name", Align::Left), ("n", Align::Right)],
            &[
                vec!["a".into(), "100".into()],
                vec!["bcdef".into(), "2".into()],
            ],
        );
        assert_eq!(text, "name     n\na      100\nbcdef    2\n");
    }

    #[test]
    fn text_columns_then_number_columns() {
        assert_eq!(
            columns(&["a", "b"], &["n"]),
            [("a", Align::Left), ("b", Align::Left), ("n", Align::Right)]
        );
        assert_eq!(columns(&["a"], &[]), [("a", Align::Left)]);
    }
}
