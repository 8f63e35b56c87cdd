//! Result messages: seed 004's placeholders (`{{ .Result }}`, `{{ .StatusCode }}`,
//! `{{ .Error }}`, `{{ .Node }}`, `{{ .Results }}`, `{{ .Args.<name> }}`), parsed when the
//! plan is compiled and filled in per node.
//!
//! Only these placeholders exist: no pipelines, functions or conditionals. A message that
//! names anything else is refused at compile time, so rendering never fails.

use std::collections::BTreeMap;

use autopilot_api::preflight::RawRecord;
use autopilot_api::v1beta2::PreflightMessage;

/// A parsed message: text and placeholders, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Template {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
}

/// What a placeholder stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Field {
    /// `.Result`: the first message.
    Result,
    /// `.Results`: every message, joined with `; `.
    Results,
    /// `.StatusCode`.
    StatusCode,
    /// `.Error`: the error text, empty when the command did not fail.
    Error,
    /// `.Node`: the node's name.
    Node,
    /// `.Args.<name>`: an argument of the message (its value already filled in).
    Arg(String),
}

impl Template {
    /// Parse `message`; `Err` says which placeholder is wrong. `args` are the message form's
    /// arguments (their values may use every placeholder but `.Args`).
    pub(super) fn parse(
        message: &PreflightMessage,
    ) -> Result<(Self, BTreeMap<String, Self>), String> {
        match message {
            PreflightMessage::Text(text) => {
                Ok((parse_text(text, &BTreeMap::new())?, BTreeMap::new()))
            }
            PreflightMessage::Message(message) => {
                let mut args = BTreeMap::new();
                for (name, value) in &message.args {
                    let parsed = parse_text(value, &BTreeMap::new())
                        .map_err(|problem| format!("args.{name}: {problem}"))?;
                    args.insert(name.clone(), parsed);
                }
                let text = parse_text(&message.default_message, &message.args)
                    .map_err(|problem| format!("defaultMessage: {problem}"))?;
                Ok((text, args))
            }
            PreflightMessage::Invalid(value) => Err(format!(
                "must be a string or an object {{id, defaultMessage, args}}, not {}",
                autopilot_api::text::truncate(&value.to_string(), 80)
            )),
        }
    }

    /// The message for `node`'s `record`.
    pub(super) fn render(
        &self,
        args: &BTreeMap<String, Self>,
        node: &str,
        record: &RawRecord,
    ) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Field(Field::Result) => out.push_str(record.result()),
                Part::Field(Field::Results) => out.push_str(&record.messages.join("; ")),
                Part::Field(Field::StatusCode) => out.push_str(&record.status_code.to_string()),
                Part::Field(Field::Error) => out.push_str(record.error.as_deref().unwrap_or("")),
                Part::Field(Field::Node) => out.push_str(node),
                Part::Field(Field::Arg(name)) => {
                    // Compile checked the name; an argument's own value has no `.Args`.
                    if let Some(arg) = args.get(name) {
                        out.push_str(&arg.render(&BTreeMap::new(), node, record));
                    }
                }
            }
        }
        out
    }
}

fn parse_text(text: &str, args: &BTreeMap<String, String>) -> Result<Template, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            parts.push(Part::Text(rest[..start].to_owned()));
        }
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(format!(
                "{{{{ at byte {} is not closed with }}}}",
                text.len() - rest.len() + start
            ));
        };
        let name = after[..end].trim();
        parts.push(Part::Field(field(name, args)?));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_owned()));
    }
    Ok(Template { parts })
}

fn field(name: &str, args: &BTreeMap<String, String>) -> Result<Field, String> {
    match name {
        ".Result" => Ok(Field::Result),
        ".Results" => Ok(Field::Results),
        ".StatusCode" => Ok(Field::StatusCode),
        ".Error" => Ok(Field::Error),
        ".Node" => Ok(Field::Node),
        other => match other.strip_prefix(".Args.") {
            Some(arg) if args.contains_key(arg) => Ok(Field::Arg(arg.to_owned())),
            Some(arg) => {
                Err(format!("{{{{ {other} }}}} names no argument {arg:?} of this message"))
            }
            None => Err(format!(
                "{{{{ {other} }}}} is not a placeholder; use .Result, .Results, .StatusCode, \
                 .Error, .Node or .Args.<name>"
            )),
        },
    }
}
