//! Observing the cluster for the Plan engine: reflector stores → the pure core's snapshot.
//!
//! Reads only. Node and ControlNode objects come from the engine's watch caches; the
//! removed-API pre-check asks the API server directly (it runs once, when a run starts).

use std::collections::BTreeMap;

use autopilot_api::v1beta2::ControlNode;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Resource;
use kube::runtime::reflector::Store;

use autopilot_engine::plan::TargetObject;
use autopilot_engine::snapshot::{SlimNode, control_node_object, node_object};

/// The resourceVersion of each object in a snapshot. A write based on the snapshot uses it as
/// its precondition, so a decision made on stale data can never overwrite newer data.
pub type Versions = BTreeMap<String, String>;

/// The planner's view of one kind of signal object, kept from pass to pass: every object in
/// the cache as the planner sees it (objects being deleted left out), and the
/// resourceVersion of each. A pass refreshes it from the cache, rebuilding only the objects
/// whose resourceVersion changed, so a pass over a large fleet does not decode every node's
/// signal again.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// The objects as the planner sees them, by name.
    pub objects: BTreeMap<String, TargetObject>,
    /// The resourceVersion of every object in the cache, by name: a write based on the view
    /// uses it as its precondition.
    pub versions: Versions,
}

impl View {
    /// Bring the view up to the ControlNode cache.
    pub fn refresh_control_nodes(&mut self, store: &Store<ControlNode>) {
        self.refresh(store, control_node_object);
    }

    /// Bring the view up to the Node cache.
    pub fn refresh_nodes(&mut self, store: &Store<SlimNode>) {
        self.refresh(store, node_object);
    }

    fn refresh<K>(&mut self, store: &Store<K>, planner_view: fn(&K) -> TargetObject)
    where
        K: Resource + Clone + 'static,
        K::DynamicType: std::hash::Hash + Eq + Clone,
    {
        let snapshot = store.state();
        // How many entries each map has for the objects in the cache.
        let (mut versioned, mut live) = (0, 0);
        // How many names the view did not have (all of them on the first pass).
        let mut added = 0;
        for object in &snapshot {
            let Some(name) = object.meta().name.as_deref() else { continue };
            let version = object.meta().resource_version.as_ref();
            versioned += usize::from(version.is_some());
            live += usize::from(object.meta().deletion_timestamp.is_none());
            if version.is_some() && self.versions.get(name) == version {
                continue;
            }
            match version {
                Some(version) => self.versions.insert(name.to_owned(), version.clone()),
                None => self.versions.remove(name),
            };
            if object.meta().deletion_timestamp.is_none() {
                added += usize::from(
                    self.objects.insert(name.to_owned(), planner_view(object)).is_none(),
                );
            } else {
                self.objects.remove(name);
            }
        }
        // Every object of the cache is in the view now; more entries means some are gone.
        // (Checked by count: a pass over a big fleet does not hash every name again.)
        if self.versions.len() > versioned || self.objects.len() > live {
            let present: std::collections::HashSet<&str> =
                snapshot.iter().filter_map(|object| object.meta().name.as_deref()).collect();
            self.versions.retain(|name, _| present.contains(name.as_str()));
            self.objects.retain(|name, _| present.contains(name.as_str()));
        }
        // Names inserted one by one, in the cache's (hashed) order, leave the maps' tree
        // nodes about two thirds full; built from sorted entries they are full. Once
        // built, a pass replaces values under names the maps have, which keeps them so.
        if added > 0 && added * 4 >= self.objects.len() {
            self.objects = std::mem::take(&mut self.objects).into_iter().collect();
            self.versions = std::mem::take(&mut self.versions).into_iter().collect();
        }
    }
}

/// The check Pods and the ConfigMaps (their templates) in the caches, by name.
pub fn collect_check_pods(
    pods: &Store<Pod>,
    templates: &Store<ConfigMap>,
) -> (BTreeMap<String, Pod>, BTreeMap<String, ConfigMap>) {
    let by_name = |name: Option<&String>| name.cloned().unwrap_or_default();
    (
        pods.state()
            .iter()
            .map(|pod| (by_name(pod.metadata.name.as_ref()), (**pod).clone()))
            .collect(),
        templates
            .state()
            .iter()
            .map(|config_map| (by_name(config_map.metadata.name.as_ref()), (**config_map).clone()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, version: &str, label: &str, deleting: bool) -> SlimNode {
        let mut metadata = serde_json::json!({
            "name": name, "resourceVersion": version, "labels": {"role": label},
        });
        if deleting {
            metadata["deletionTimestamp"] = "2026-11-25T00:00:00Z".into();
        }
        serde_json::from_value(serde_json::json!({ "metadata": metadata })).expect("a Node")
    }

    #[test]
    fn a_kept_view_follows_the_cache_rebuilding_only_changed_objects() {
        let (store, mut writer) = kube::runtime::reflector::store::<SlimNode>();
        let apply = |writer: &mut kube::runtime::reflector::store::Writer<SlimNode>,
                     node: SlimNode| {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(node));
        };
        apply(&mut writer, node("a", "1", "old", false));
        apply(&mut writer, node("b", "1", "old", false));
        apply(&mut writer, node("c", "1", "old", false));
        let mut view = View::default();
        view.refresh_nodes(&store);
        assert_eq!(view.objects.keys().collect::<Vec<_>>(), ["a", "b", "c"]);

        apply(&mut writer, node("b", "2", "new", false));
        apply(&mut writer, node("c", "2", "old", true));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Delete(node(
            "a", "1", "old", false,
        )));
        apply(&mut writer, node("d", "1", "new", false));
        view.refresh_nodes(&store);

        assert_eq!(
            view.objects.keys().collect::<Vec<_>>(),
            ["b", "d"],
            "a is gone, c is being deleted"
        );
        assert_eq!(view.objects["b"].labels.get("role"), Some("new"));
        let versions: Vec<(&str, &str)> =
            view.versions.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(versions, [("b", "2"), ("c", "2"), ("d", "1")]);

        // An object whose resourceVersion is unchanged is not rebuilt (a real change always
        // comes with a new one; this one is made up to tell).
        apply(&mut writer, node("d", "1", "tampered", false));
        view.refresh_nodes(&store);
        assert_eq!(
            view.objects["d"].labels.get("role"),
            Some("new"),
            "same resourceVersion: not rebuilt"
        );
    }
}
