//! Load order for a set of kernel modules: a depth-first topological sort of the
//! `depends=` graph read by [`crate::modinfo`], dependencies first, each module once.
//!
//! The order is deterministic: roots are visited in the order given and each module's
//! dependencies in the order its `depends=` lists them.

use std::collections::{BTreeMap, BTreeSet};

/// Why no load order exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DepsortError {
    /// Modules depend on each other in a loop; `cycle` starts and ends with the same module.
    #[error("module dependency cycle: {}", cycle.join(" -> "))]
    Cycle {
        /// The loop, first module repeated at the end.
        cycle: Vec<String>,
    },
    /// A module (a root, or a dependency of `needed_by`) is not in the graph.
    #[error("module {module} is not in the dependency graph{}", needed_by.as_ref().map(|m| format!(" (needed by {m})")).unwrap_or_default())]
    Unknown {
        /// The missing module.
        module: String,
        /// The module that depends on it, if it is not a root.
        needed_by: Option<String>,
    },
}

/// Orders `roots` and everything they (transitively) depend on so that each module comes
/// after all of its dependencies. `graph` maps each module to its direct dependencies.
pub fn load_order<S: AsRef<str>>(
    roots: &[S],
    graph: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, DepsortError> {
    let mut sorter = Sorter {
        graph,
        done: BTreeSet::new(),
        path: Vec::new(),
        order: Vec::new(),
    };
    for root in roots {
        sorter.visit(root.as_ref(), None)?;
    }
    Ok(sorter.order)
}

struct Sorter<'g> {
    graph: &'g BTreeMap<String, Vec<String>>,
    done: BTreeSet<&'g str>,
    /// Modules whose dependencies are being visited, outermost first.
    path: Vec<&'g str>,
    order: Vec<String>,
}

impl<'g> Sorter<'g> {
    fn visit(&mut self, module: &str, needed_by: Option<&str>) -> Result<(), DepsortError> {
        let Some((name, deps)) = self.graph.get_key_value(module) else {
            return Err(DepsortError::Unknown {
                module: module.to_owned(),
                needed_by: needed_by.map(str::to_owned),
            });
        };
        let name = name.as_str();
        if self.done.contains(name) {
            return Ok(());
        }
        if let Some(start) = self.path.iter().position(|&m| m == name) {
            let mut cycle: Vec<String> = self.path[start..].iter().map(|&m| m.to_owned()).collect();
            cycle.push(name.to_owned());
            return Err(DepsortError::Cycle { cycle });
        }
        self.path.push(name);
        for dep in deps {
            self.visit(dep, Some(name))?;
        }
        self.path.pop();
        self.done.insert(name);
        self.order.push(name.to_owned());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(m, deps)| (m.to_string(), deps.iter().map(|d| d.to_string()).collect()))
            .collect()
    }

    /// The real graph of Debian's 6.1 cloud kernel for Airlock's default module set.
    fn debian_cloud() -> BTreeMap<String, Vec<String>> {
        graph(&[
            ("virtio_mmio", &["virtio", "virtio_ring"]),
            ("virtio_blk", &["virtio", "virtio_ring"]),
            ("virtio_console", &["virtio", "virtio_ring"]),
            (
                "vmw_vsock_virtio_transport",
                &[
                    "virtio",
                    "vmw_vsock_virtio_transport_common",
                    "virtio_ring",
                    "vsock",
                ],
            ),
            ("vmw_vsock_virtio_transport_common", &["vsock"]),
            ("vsock", &[]),
            ("overlay", &[]),
            ("virtio", &["virtio_ring"]),
            ("virtio_ring", &[]),
        ])
    }

    #[test]
    fn dependencies_come_first_and_each_module_once() -> anyhow::Result<()> {
        let roots = [
            "virtio_mmio",
            "virtio_blk",
            "virtio_console",
            "vmw_vsock_virtio_transport",
            "overlay",
        ];
        let order = load_order(&roots, &debian_cloud())?;
        assert_eq!(
            order,
            [
                "virtio_ring",
                "virtio",
                "virtio_mmio",
                "virtio_blk",
                "virtio_console",
                "vsock",
                "vmw_vsock_virtio_transport_common",
                "vmw_vsock_virtio_transport",
                "overlay",
            ]
        );
        let graph = debian_cloud();
        for (i, module) in order.iter().enumerate() {
            for dep in &graph[module] {
                let at = order.iter().position(|m| m == dep);
                assert!(at.is_some_and(|at| at < i), "{dep} must precede {module}");
            }
        }
        Ok(())
    }

    #[test]
    fn duplicate_roots_are_listed_once() -> anyhow::Result<()> {
        let order = load_order(&["virtio", "virtio_ring", "virtio"], &debian_cloud())?;
        assert_eq!(order, ["virtio_ring", "virtio"]);
        Ok(())
    }

    #[test]
    fn cycles_are_reported_with_their_path() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("top", &["a"])]);
        assert_eq!(
            load_order(&["top"], &g),
            Err(DepsortError::Cycle {
                cycle: vec!["a".into(), "b".into(), "c".into(), "a".into()]
            })
        );
        let selfloop = graph(&[("x", &["x"])]);
        assert!(matches!(
            load_order(&["x"], &selfloop),
            Err(DepsortError::Cycle { .. })
        ));
    }

    #[test]
    fn unknown_modules_name_who_needed_them() {
        let g = graph(&[("a", &["ghost"])]);
        assert_eq!(
            load_order(&["a"], &g),
            Err(DepsortError::Unknown {
                module: "ghost".into(),
                needed_by: Some("a".into())
            })
        );
        assert_eq!(
            load_order(&["nope"], &g),
            Err(DepsortError::Unknown {
                module: "nope".into(),
                needed_by: None
            })
        );
    }
}
