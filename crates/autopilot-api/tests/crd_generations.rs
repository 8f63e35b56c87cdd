//! Each CRD schema generation stays readable by the one before (DESIGN §14): a binary rolled
//! back after an update keeps the newer CRDs in the cluster (it never applies older ones),
//! so what it reads and writes must still be valid under them.
//!
//! `tests/crd-generations/<n>/` holds the CRDs of generation `n` as `cargo xtask crdgen`
//! wrote them. The CRDs this crate generates must be those of
//! [`CRD_SCHEMA_GENERATION`]; a change to a CRD therefore fails here until the generation is
//! bumped and the new snapshot added (copy `manifests/crds/*.yaml` into a new directory).
//! Between consecutive generations, no property may disappear or change its type, and no
//! property may become required.

use std::collections::BTreeMap;
use std::path::Path;

use autopilot_api::v1beta2::{CRD_SCHEMA_GENERATION, crds};
use serde_json::Value;

/// The CRDs of generation `n` by name, from their snapshot.
fn snapshot(n: u32) -> Option<BTreeMap<String, Value>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/crd-generations/{n}"));
    let entries = std::fs::read_dir(&dir).ok()?;
    let mut crds = BTreeMap::new();
    for entry in entries {
        let path = entry.expect("a snapshot file").path();
        let text = std::fs::read_to_string(&path).expect("reading a snapshot");
        let value: Value = serde_saphyr::from_str(&text).expect("a CRD");
        let name = value["metadata"]["name"].as_str().expect("a name").to_owned();
        crds.insert(name, value);
    }
    Some(crds)
}

/// Every `(path, type)` of a schema's properties, and every required path.
fn shape(
    schema: &Value,
    path: &str,
    types: &mut BTreeMap<String, Value>,
    required: &mut Vec<String>,
) {
    if let Some(kind) = schema.get("type") {
        types.insert(path.to_owned(), kind.clone());
    }
    for name in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        required.push(format!("{path}.{}", name.as_str().unwrap_or_default()));
    }
    for (name, property) in
        schema.get("properties").and_then(Value::as_object).into_iter().flatten()
    {
        shape(property, &format!("{path}.{name}"), types, required);
    }
    if let Some(items) = schema.get("items") {
        shape(items, &format!("{path}[]"), types, required);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        shape(values, &format!("{path}{{}}"), types, required);
    }
}

/// Why `new` cannot be read by a binary of `old`'s generation, per version of the CRD.
fn incompatibilities(old: &Value, new: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for old_version in old["spec"]["versions"].as_array().into_iter().flatten() {
        let name = old_version["name"].as_str().unwrap_or_default();
        let new_version = new["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"].as_str() == Some(name));
        let Some(new_version) = new_version else {
            problems.push(format!("version {name} is gone"));
            continue;
        };
        let (mut old_types, mut old_required) = (BTreeMap::new(), Vec::new());
        let (mut new_types, mut new_required) = (BTreeMap::new(), Vec::new());
        shape(&old_version["schema"]["openAPIV3Schema"], name, &mut old_types, &mut old_required);
        shape(&new_version["schema"]["openAPIV3Schema"], name, &mut new_types, &mut new_required);
        for (path, kind) in &old_types {
            match new_types.get(path) {
                None => problems.push(format!("{path} is gone")),
                Some(new_kind) if new_kind != kind => {
                    problems.push(format!("{path} changed type from {kind} to {new_kind}"));
                }
                Some(_) => {}
            }
        }
        // A field required inside an object the old schema did not have is fine: an older
        // binary never writes that object (it does not know it), so it cannot leave it
        // without the field.
        let existed = |path: &String| {
            path.rsplit_once('.').is_some_and(|(parent, _)| old_types.contains_key(parent))
        };
        for path in new_required.iter().filter(|path| !old_required.contains(path) && existed(path))
        {
            problems.push(format!("{path} became required"));
        }
    }
    problems
}

#[test]
fn the_generated_crds_are_those_of_the_current_generation() {
    let pinned = snapshot(CRD_SCHEMA_GENERATION).unwrap_or_else(|| {
        panic!(
            "no snapshot of CRD generation {CRD_SCHEMA_GENERATION}: copy manifests/crds/*.yaml \
             into crates/autopilot-api/tests/crd-generations/{CRD_SCHEMA_GENERATION}/"
        )
    });
    for crd in crds() {
        let generated = serde_json::to_value(&crd).expect("a CRD");
        let name = generated["metadata"]["name"].as_str().expect("a name").to_owned();
        let snapshot = pinned.get(&name).unwrap_or_else(|| panic!("{name} has no snapshot"));
        assert!(
            generated["spec"] == snapshot["spec"],
            "CRD {name} changed since generation {CRD_SCHEMA_GENERATION} was pinned: bump \
             CRD_SCHEMA_GENERATION, run `cargo xtask crdgen` and copy manifests/crds/*.yaml into \
             tests/crd-generations/<the new generation>/ (the change must stay readable by the \
             previous generation, see crd_generations_stay_readable_by_the_one_before)"
        );
        let annotated =
            &generated["metadata"]["annotations"][autopilot_api::keys::ANNOTATION_CRD_GENERATION];
        assert_eq!(annotated, &Value::from(CRD_SCHEMA_GENERATION.to_string()), "{name}");
    }
}

/// The generations that have a snapshot, in order.
fn pinned_generations() -> Vec<u32> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/crd-generations");
    let mut generations: Vec<u32> = std::fs::read_dir(dir)
        .expect("the snapshots")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    generations.sort_unstable();
    generations
}

#[test]
fn crd_generations_stay_readable_by_the_one_before() {
    let generations = pinned_generations();
    let expected: Vec<u32> = (1..=CRD_SCHEMA_GENERATION).collect();
    assert_eq!(generations, expected, "every generation up to the current one is pinned");
    for pair in generations.windows(2) {
        let (old, new) = (snapshot(pair[0]).expect("pinned"), snapshot(pair[1]).expect("pinned"));
        for (name, old_crd) in &old {
            let new_crd =
                new.get(name).unwrap_or_else(|| panic!("CRD {name} is gone in {}", pair[1]));
            let problems = incompatibilities(old_crd, new_crd);
            assert!(problems.is_empty(), "generation {} of {name}: {problems:?}", pair[1]);
        }
    }
}

#[test]
fn the_compatibility_rule_refuses_what_an_older_binary_could_not_read() {
    let old = serde_json::json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "id": {"type": "string"}, "count": {"type": "integer"}}}}}}}]}});
    let mut added = old.clone();
    added["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["extra"] = serde_json::json!({"type": "string"});
    assert!(incompatibilities(&old, &added).is_empty(), "an optional field may be added");
    let mut removed = old.clone();
    removed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        .as_object_mut()
        .expect("properties")
        .remove("count");
    assert_eq!(incompatibilities(&old, &removed), ["v1.spec.count is gone"]);
    let mut retyped = old.clone();
    retyped["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["count"] = serde_json::json!({"type": "string"});
    assert_eq!(
        incompatibilities(&old, &retyped),
        ["v1.spec.count changed type from \"integer\" to \"string\""]
    );
    let mut required = old.clone();
    required["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"] =
        serde_json::json!(["id"]);
    assert_eq!(incompatibilities(&old, &required), ["v1.spec.id became required"]);
    let mut new_object = old.clone();
    new_object["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["extra"] = serde_json::json!({"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}}});
    assert!(
        incompatibilities(&old, &new_object).is_empty(),
        "a new optional object may require its own fields"
    );
}
