//! Schema helpers shared by the CRD types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

/// A plain `{type: string, enum: [...]}` schema.
///
/// schemars turns documented unit variants into a `oneOf` of `const`s; a flat `enum` is
/// what `kubectl explain` and the apiserver's structural-schema rules handle best.
pub(crate) fn string_enum<'a>(
    description: &str,
    values: impl Iterator<Item = &'a str>,
) -> schemars::Schema {
    let values: Vec<&str> = values.collect();
    schemars::json_schema!({
        "description": description,
        "type": "string",
        "enum": values,
    })
}

/// The CRD schema of `T`, generated the way kube's `CustomResource` derive does it
/// (OpenAPI v3, subschemas inlined, nullable options, structural rewrites).
pub(crate) fn crd_schema_for<T: schemars::JsonSchema>() -> JSONSchemaProps {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .with_transform(kube_core::schema::OptionalIntOrString)
        .into_generator();
    let mut value = serde_json::to_value(generator.into_root_schema_for::<T>())
        .expect("a schemars schema is plain JSON");
    // A root schema carries a `title` (the Rust type name), which means nothing in a CRD.
    if let Some(object) = value.as_object_mut() {
        object.remove("title");
    }
    serde_json::from_value(value).expect("schemars emits valid JSONSchemaProps")
}

/// An object of any shape, kept as written (`x-kubernetes-preserve-unknown-fields`), for
/// fields whose shape depends on another field (a preflight command's `data`).
pub(crate) fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The command's data; its shape depends on the command id.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
