//! Per-kind settings taken from environment variables: worker count and Ansible verbosity.

use super::{Environment, Gvk};

/// A per-kind value and the warnings reading it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Override<T> {
    pub(super) value: T,
    pub(super) warnings: Vec<String>,
}

/// The worker count for `gvk`: `MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>`, else the deprecated
/// `WORKER_<KIND>_<GROUP>`, else `default`. As upstream, a set but unparsable variable falls back to
/// `default` without consulting the other one, and a value ≤ 0 also means `default`.
pub(super) fn max_concurrent_reconciles(gvk: &Gvk, default: usize, env: &Environment) -> Override<usize> {
    let current = gvk.env_var("MAX_CONCURRENT_RECONCILES");
    let deprecated = gvk.env_var("WORKER");
    let mut warnings = Vec::new();
    let (name, text) = match (env.var(&current), env.var(&deprecated)) {
        (Some(text), _) => (current, text),
        (None, Some(text)) => {
            warnings.push(format!("environment variable {deprecated} is deprecated, use {current} instead"));
            (deprecated, text)
        }
        (None, None) => {
            return Override { value: default, warnings };
        }
    };
    let value = match go_atoi(text) {
        Some(number) if number > 0 => usize::try_from(number).unwrap_or(default),
        _ => {
            warnings.push(format!(
                "environment variable {name}={text:?} is not a positive integer; using {default}"
            ));
            default
        }
    };
    Override { value, warnings }
}

/// The `-v` count for `gvk`: `ANSIBLE_VERBOSITY_<KIND>_<GROUP>` when it is an integer in 0..=7,
/// else `default`.
pub(super) fn ansible_verbosity(gvk: &Gvk, default: u8, env: &Environment) -> Override<u8> {
    let name = gvk.env_var("ANSIBLE_VERBOSITY");
    let Some(text) = env.var(&name) else {
        return Override { value: default, warnings: Vec::new() };
    };
    match go_atoi(text).and_then(|number| u8::try_from(number).ok()).filter(|number| *number <= 7) {
        Some(value) => Override { value, warnings: Vec::new() },
        None => Override {
            value: default,
            warnings: vec![format!(
                "environment variable {name}={text:?} is not an integer from 0 to 7; using {default}"
            )],
        },
    }
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits, nothing else (no spaces).
fn go_atoi(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memcached() -> Gvk {
        Gvk::new("cache.example.com", "v1alpha1", "Memcached")
    }

    fn env(vars: &[(&str, &str)]) -> Environment {
        vars.iter().fold(Environment::new("/"), |env, (name, value)| env.with_var(*name, *value))
    }

    #[test]
    fn max_concurrent_reconciles_defaults_to_the_flag_value() {
        assert_eq!(
            max_concurrent_reconciles(&memcached(), 4, &env(&[])),
            Override { value: 4, warnings: vec![] }
        );
    }

    #[test]
    fn max_concurrent_reconciles_env_var_overrides_the_flag() {
        let env = env(&[("MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM", "7")]);
        assert_eq!(max_concurrent_reconciles(&memcached(), 4, &env).value, 7);
    }

    #[test]
    fn max_concurrent_reconciles_takes_precedence_over_worker() {
        let env = env(&[
            ("MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM", "7"),
            ("WORKER_MEMCACHED_CACHE_EXAMPLE_COM", "9"),
        ]);
        assert_eq!(max_concurrent_reconciles(&memcached(), 4, &env), Override { value: 7, warnings: vec![] });
    }

    #[test]
    fn deprecated_worker_env_var_is_used_with_a_warning() {
        let result =
            max_concurrent_reconciles(&memcached(), 4, &env(&[("WORKER_MEMCACHED_CACHE_EXAMPLE_COM", "3")]));
        assert_eq!(result.value, 3);
        assert_eq!(
            result.warnings,
            [
                "environment variable WORKER_MEMCACHED_CACHE_EXAMPLE_COM is deprecated, use MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM instead"
            ]
        );
    }

    #[test]
    fn non_integer_or_non_positive_worker_count_falls_back_to_the_flag_with_a_warning() {
        for text in ["abc", "0", "-2", " 3", "3.0", ""] {
            let env = env(&[("MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM", text)]);
            let result = max_concurrent_reconciles(&memcached(), 4, &env);
            assert_eq!(result.value, 4, "{text:?}");
            assert_eq!(result.warnings.len(), 1, "{text:?}");
        }
    }

    #[test]
    fn unparsable_max_concurrent_reconciles_does_not_fall_through_to_worker() {
        let env = env(&[
            ("MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM", "many"),
            ("WORKER_MEMCACHED_CACHE_EXAMPLE_COM", "9"),
        ]);
        assert_eq!(max_concurrent_reconciles(&memcached(), 4, &env).value, 4);
    }

    #[test]
    fn core_group_env_var_name_ends_with_an_underscore() {
        let env = env(&[("MAX_CONCURRENT_RECONCILES_SECRET_", "2")]);
        assert_eq!(max_concurrent_reconciles(&Gvk::new("", "v1", "Secret"), 4, &env).value, 2);
    }

    #[test]
    fn ansible_verbosity_env_var_overrides_the_flag_within_zero_to_seven() {
        for (text, expected) in [("0", 0), ("7", 7), ("+3", 3)] {
            let env = env(&[("ANSIBLE_VERBOSITY_MEMCACHED_CACHE_EXAMPLE_COM", text)]);
            assert_eq!(
                ansible_verbosity(&memcached(), 2, &env),
                Override { value: expected, warnings: vec![] }
            );
        }
    }

    #[test]
    fn ansible_verbosity_out_of_range_or_non_integer_uses_the_flag_with_a_warning() {
        for text in ["8", "-1", "loud", "300"] {
            let env = env(&[("ANSIBLE_VERBOSITY_MEMCACHED_CACHE_EXAMPLE_COM", text)]);
            let result = ansible_verbosity(&memcached(), 2, &env);
            assert_eq!(result.value, 2, "{text:?}");
            assert_eq!(result.warnings.len(), 1, "{text:?}");
        }
    }

    #[test]
    fn ansible_verbosity_unset_is_the_flag_value_without_warning() {
        assert_eq!(ansible_verbosity(&memcached(), 2, &env(&[])), Override { value: 2, warnings: vec![] });
    }
}
