//! Byte scanning for the parser: character classes and the word-at-a-time searches that
//! dominate parse time (label values, line ends).

/// Character classes, one bit each, indexed by byte.
pub(super) const NAME_START: u8 = 1;
pub(super) const NAME_CONTINUE: u8 = 2;
pub(super) const LABEL_START: u8 = 4;
pub(super) const LABEL_CONTINUE: u8 = 8;
const BLANK: u8 = 16;

const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let alpha = b.is_ascii_alphabetic() || b == b'_';
        let digit = b.is_ascii_digit();
        if alpha || b == b':' {
            t[c] |= NAME_START | NAME_CONTINUE;
        }
        if digit {
            t[c] |= NAME_CONTINUE | LABEL_CONTINUE;
        }
        if alpha {
            t[c] |= LABEL_START | LABEL_CONTINUE;
        }
        if b == b' ' || b == b'\t' {
            t[c] |= BLANK;
        }
        c += 1;
    }
    t
};

#[inline]
fn is(class: u8, b: u8) -> bool {
    CLASS[usize::from(b)] & class != 0
}

/// Space or tab.
#[inline]
pub(super) fn is_blank(b: u8) -> bool {
    is(BLANK, b)
}

/// Index of the first byte at or after `i` that is not a space or tab.
#[inline]
pub(super) fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is(BLANK, b[i]) {
        i += 1;
    }
    i
}

/// End of the name-like token starting at `i` (`i` itself when none starts there). `cont` is
/// [`NAME_CONTINUE`] or [`LABEL_CONTINUE`]; eight bytes per step.
#[inline]
pub(super) fn scan_name(b: &[u8], i: usize, start: u8, cont: u8) -> usize {
    if i >= b.len() || !is(start, b[i]) {
        return i;
    }
    let mut j = i + 1;
    let last_digit_or_colon = if cont == NAME_CONTINUE { b':' } else { b'9' };
    while let Some(chunk) = b.get(j..j + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let non_name = !name_bytes(w, last_digit_or_colon) & HIGHS;
        if non_name != 0 {
            return j + (non_name.trailing_zeros() / 8) as usize;
        }
        j += 8;
    }
    while j < b.len() && is(cont, b[j]) {
        j += 1;
    }
    j
}

/// High bit set in each byte of `t` (bytes below 0x80) within `lo..=hi`; exact, since no
/// byte sum carries into the next byte.
#[inline]
fn in_range(t: u64, lo: u8, hi: u8) -> u64 {
    let at_least_lo = t + ONES * u64::from(0x80 - lo);
    let above_hi = t + ONES * u64::from(0x7f - hi);
    at_least_lo & !above_hi & HIGHS
}

/// High bit set in each byte of `w` that is `[a-zA-Z_0-9]` or in `'0'..=last_digit_or_colon`
/// (`:` is the byte after `9`, so `b':'` admits metric-name colons).
#[inline]
fn name_bytes(w: u64, last_digit_or_colon: u8) -> u64 {
    let ascii = !w & HIGHS;
    let t = w & !HIGHS;
    let letter = in_range(t | (ONES * 0x20), b'a', b'z');
    let digit = in_range(t, b'0', last_digit_or_colon);
    let underscore = in_range(t, b'_', b'_');
    ascii & (letter | digit | underscore)
}

/// End of the token starting at `i`: the next space, tab, newline or end of input.
#[inline]
pub(super) fn scan_token(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && !is(BLANK, b[i]) && b[i] != b'\n' {
        i += 1;
    }
    i
}

/// Whether `i` is at the end of a line: end of input, `\n`, or a `\r` ending the line.
#[inline]
pub(super) fn is_eol(b: &[u8], i: usize) -> bool {
    match b.get(i) {
        None | Some(b'\n') => true,
        Some(b'\r') => matches!(b.get(i + 1), None | Some(b'\n')),
        Some(_) => false,
    }
}

/// Index of the next `\n` at or after `i`, or `b.len()`. Eight bytes per step.
#[inline]
pub(super) fn find_newline(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let hits = matches_byte(u64::from_le_bytes(word), b'\n');
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i.min(b.len())
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `word` equal to `byte`; the lowest set bit is exact (higher
/// ones may be false positives, which callers never look at).
#[inline]
fn matches_byte(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// Index of the first `"`, `\` or `\n` at or after `i`, or `b.len()`: the end of a label
/// value's plain run. Eight bytes per step.
#[inline]
pub(super) fn find_value_stop(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let hits = matches_byte(w, b'"') | matches_byte(w, b'\\') | matches_byte(w, b'\n');
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !matches!(b[i], b'"' | b'\\' | b'\n') {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_stop_matches_a_plain_search() {
        let hay = b"abcdefgh\"ijklmnopqrstu\\vwxyz0123456789\nABCDEFG\"\"";
        for start in 0..hay.len() {
            for end in start..=hay.len() {
                let b = &hay[..end];
                let plain = (start..b.len())
                    .find(|&i| matches!(b[i], b'"' | b'\\' | b'\n'))
                    .unwrap_or(b.len());
                assert_eq!(find_value_stop(b, start), plain, "{start}..{end}");
            }
        }
        // Bytes next to the targets (0x21, 0x23, 0x5b, 0x5d, 0x09, 0x0b) and high bytes.
        let tricky = [0x21u8, 0x23, 0x5b, 0x5d, 0x09, 0x0b, 0xa2, 0xdc, 0x8a, 0x22];
        assert_eq!(find_value_stop(&tricky, 0), 9);
    }

    #[test]
    fn newline_search() {
        let hay = b"0123456789abcdef\nxyz\n";
        for start in 0..=hay.len() {
            let plain = (start..hay.len())
                .find(|&i| hay[i] == b'\n')
                .unwrap_or(hay.len());
            assert_eq!(find_newline(hay, start), plain, "{start}");
        }
        assert_eq!(find_newline(b"abc", 7), 3);
    }

    #[test]
    fn name_scan_matches_the_byte_table() {
        for (start, cont) in [(NAME_START, NAME_CONTINUE), (LABEL_START, LABEL_CONTINUE)] {
            for byte in 0..=255u8 {
                for pos in 1..20 {
                    let mut hay = b"aZ_09:zzzzzzzzzzzzzzzzzzzzzzz".to_vec();
                    if cont == LABEL_CONTINUE {
                        hay[5] = b'Q';
                    }
                    hay[pos] = byte;
                    let plain = (1..hay.len())
                        .find(|&j| !is(cont, hay[j]))
                        .unwrap_or(hay.len());
                    assert_eq!(
                        scan_name(&hay, 0, start, cont),
                        plain,
                        "byte {byte:#x} at {pos}"
                    );
                }
            }
        }
    }

    #[test]
    fn end_of_line() {
        assert!(is_eol(b"a", 1));
        assert!(is_eol(b"a\n", 1));
        assert!(is_eol(b"a\r\n", 1));
        assert!(is_eol(b"a\r", 1));
        assert!(!is_eol(b"a\rb", 1));
        assert!(!is_eol(b"ab", 1));
    }
}
