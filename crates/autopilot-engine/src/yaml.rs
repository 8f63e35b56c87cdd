//! YAML reading with one set of rules for every YAML input autopilot parses at run time:
//! Plan and check files (`k0s autopilot check -f`, `preview -f`), check Pod templates,
//! update-server answers and exec allow-lists.
//!
//! The rules are YAML 1.2's core schema: only `true` and `false` are booleans (`yes`, `on`
//! and `off` stay strings, as a Kubernetes label value often is), and a number with leading
//! zeros or underscores (`0755`, `1_000`) stays a string when nothing asks for a number.
//! Duplicate keys are an error. Messages are one line and end with the place, `at line L,
//! column C`, so they fit a status field, a log line or a CLI error.

use serde::de::DeserializeOwned;

/// Why a text is not YAML of the expected shape; its message ends with the line and column.
pub type Error = serde_saphyr::Error;

/// Read one YAML document (JSON is YAML too) into `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options())
}

/// The rules of this module (see its documentation).
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        with_snippet: false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::from_str;

    #[test]
    fn only_true_and_false_are_booleans_and_zero_padded_numbers_stay_strings() {
        let value: Value =
            from_str("a: yes\nb: on\nc: true\nd: 0755\ne: 1_000\nf: 12\ng: 1.5\nh: null\n")
                .expect("YAML");
        assert_eq!(
            value,
            json!({"a": "yes", "b": "on", "c": true, "d": "0755", "e": "1_000", "f": 12,
                   "g": 1.5, "h": null})
        );
    }

    #[test]
    fn a_syntax_error_is_one_line_naming_line_and_column() {
        let error = from_str::<Value>("spec:\n  commands: [\n").expect_err("unclosed");
        let message = error.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains("at line 2, column 13"), "{message}");
    }

    #[test]
    fn a_type_error_names_the_line_and_column_of_the_value() {
        let error = from_str::<BTreeMap<String, u32>>("# a comment\ncount: many\n")
            .expect_err("not a number");
        assert!(error.to_string().contains("at line 2, column 8"), "{error}");
    }

    #[test]
    fn a_duplicate_key_is_an_error() {
        let error = from_str::<Value>("a: 1\na: 2\n").expect_err("duplicate");
        assert!(error.to_string().contains("line 2"), "{error}");
    }
}
