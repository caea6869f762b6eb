//! `$VAR` / `${VAR}` expansion of the raw watches file, with Go `os.Expand` semantics.

/// Expands `$NAME` and `${NAME}` in `text` exactly as upstream does (Go `os.Expand` with a mapping
/// that keeps unset variables as the literal `${NAME}`):
/// - `$NAME` takes the longest run of ASCII letters, digits and `_`; `${...}` takes everything up to
///   the first `}`.
/// - `$` followed by one of `*#$@!?-` or a digit is a one-character name (`$1x` is `$1` then `x`).
/// - an unset name becomes `${NAME}`; a set but empty one becomes "".
/// - `${}` is removed, an unclosed `${` loses those two characters, and a `$` followed by anything else
///   (or at the very end) stays as it is.
pub(super) fn expand<'a>(text: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    // Every index used to slice below sits next to an ASCII byte, so it is a char boundary.
    let mut copied_up_to = 0;
    let mut j = 0;
    while j < bytes.len() {
        if bytes[j] == b'$' && j + 1 < bytes.len() {
            out.push_str(&text[copied_up_to..j]);
            let (name, width) = shell_name(&text[j + 1..]);
            if name.is_empty() {
                if width == 0 {
                    // Valid syntax but no name: the dollar stays.
                    out.push('$');
                }
                // Otherwise bad syntax (`${}` or an unclosed `${`): the characters are eaten.
            } else {
                match lookup(name) {
                    Some(value) => out.push_str(value),
                    None => {
                        out.push_str("${");
                        out.push_str(name);
                        out.push('}');
                    }
                }
            }
            j += width;
            copied_up_to = j + 1;
        }
        j += 1;
    }
    out.push_str(&text[copied_up_to.min(text.len())..]);
    out
}

/// The name starting `s` (the text after a `$`) and how many bytes it spans, as Go's `getShellName`.
fn shell_name(s: &str) -> (&str, usize) {
    let bytes = s.as_bytes();
    if bytes[0] == b'{' {
        if bytes.len() > 2 && is_special(bytes[1]) && bytes[2] == b'}' {
            return (&s[1..2], 3);
        }
        return match bytes.iter().skip(1).position(|&b| b == b'}') {
            Some(0) => ("", 2),
            Some(offset) => (&s[1..offset + 1], offset + 2),
            None => ("", 1),
        };
    }
    if is_special(bytes[0]) {
        return (&s[0..1], 1);
    }
    let len = bytes.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
    (&s[..len], len)
}

/// Shell special parameters (`$*`, `$1`, ...), which Go treats as one-character names.
fn is_special(byte: u8) -> bool {
    matches!(byte, b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-') || byte.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> String {
        let env = [("HOST", "example.org"), ("EMPTY", ""), ("1", "one"), ("A_1", "a1"), ("-", "dash")];
        expand(text, |name| env.iter().find(|(key, _)| *key == name).map(|(_, value)| *value))
    }

    #[test]
    fn braced_and_bare_variables_are_both_expanded() {
        assert_eq!(run("a ${HOST} b $HOST c"), "a example.org b example.org c");
    }

    #[test]
    fn unset_variable_becomes_the_literal_braced_reference() {
        assert_eq!(run("${MISSING}"), "${MISSING}");
        assert_eq!(run("x$MISSING/y"), "x${MISSING}/y");
    }

    #[test]
    fn set_but_empty_variable_expands_to_nothing() {
        assert_eq!(run("[${EMPTY}][$EMPTY]"), "[][]");
    }

    #[test]
    fn bare_name_is_the_longest_run_of_letters_digits_and_underscores() {
        assert_eq!(run("$A_1.x"), "a1.x");
        assert_eq!(run("$HOSTNAME"), "${HOSTNAME}");
    }

    #[test]
    fn digit_after_dollar_is_a_one_character_name() {
        assert_eq!(run("$1x"), "onex");
        assert_eq!(run("$23"), "${2}3");
    }

    #[test]
    fn special_character_after_dollar_is_a_one_character_name() {
        assert_eq!(run("$-x"), "dashx");
        assert_eq!(run("$$"), "${$}");
        assert_eq!(run("a$?b"), "a${?}b");
        assert_eq!(run("${-}"), "dash");
    }

    #[test]
    fn dollar_before_other_characters_or_at_the_end_is_kept() {
        assert_eq!(run("^foo$'"), "^foo$'");
        assert_eq!(run("cost $ 5"), "cost $ 5");
        assert_eq!(run("end$"), "end$");
        assert_eq!(run("$"), "$");
    }

    #[test]
    fn empty_braces_are_removed() {
        assert_eq!(run("a${}b"), "ab");
    }

    #[test]
    fn unclosed_brace_drops_the_dollar_and_brace() {
        assert_eq!(run("a${HOST"), "aHOST");
    }

    #[test]
    fn braced_name_may_hold_any_characters_and_has_no_default_syntax() {
        assert_eq!(run("${HOST:-fallback}"), "${HOST:-fallback}");
        assert_eq!(run("${ HOST }"), "${ HOST }");
    }

    #[test]
    fn text_without_dollars_is_unchanged_including_non_ascii() {
        assert_eq!(run("größe: ✓ {{ jinja }}"), "größe: ✓ {{ jinja }}");
        assert_eq!(run("ü$HOSTü"), "üexample.orgü");
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::proptest_support::{config, text};

    const ENV: [(&str, &str); 4] =
        [("HOST", "example.org"), ("EMPTY", ""), ("DOLLAR", "$HOST"), ("1", "one")];

    fn lookup(name: &str) -> Option<&'static str> {
        ENV.iter().find(|(key, _)| *key == name).map(|(_, value)| *value)
    }

    /// A piece of a watches file and what it expands to.
    fn piece() -> impl Strategy<Value = (String, String)> {
        prop_oneof![
            "[^$]{0,8}".prop_map(|text| (text.clone(), text)),
            proptest::sample::select(&ENV[..])
                .prop_map(|(name, value)| (format!("${{{name}}}"), value.to_string())),
            "[A-Z_][A-Z0-9_]{0,6}"
                .prop_filter("unset", |name| lookup(name).is_none())
                .prop_map(|name| (format!("${{{name}}}"), format!("${{{name}}}"))),
        ]
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn any_text_expands_without_panicking(input in text()) {
            let output = expand(&input, lookup);
            if !input.contains('$') {
                prop_assert_eq!(output, input);
            }
        }

        #[test]
        fn braced_references_expand_to_their_value_or_stay_literal(pieces in proptest::collection::vec(piece(), 0..8)) {
            let input: String = pieces.iter().map(|(text, _)| text.as_str()).collect();
            let want: String = pieces.iter().map(|(_, expanded)| expanded.as_str()).collect();
            // A value is inserted once: `$HOST` inside DOLLAR's value stays as it is.
            prop_assert_eq!(expand(&input, lookup), want);
        }

        #[test]
        fn bare_names_end_at_the_first_character_that_cannot_be_in_a_name(
            name in proptest::sample::select(&["HOST", "EMPTY", "MISSING"][..]),
            after in "[^A-Za-z0-9_$]{0,4}",
        ) {
            let want = lookup(name).map_or(format!("${{{name}}}"), str::to_string) + &after;
            prop_assert_eq!(expand(&format!("${name}{after}"), lookup), want);
        }
    }
}
