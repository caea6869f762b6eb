//! The crate's import graph (STYLE.md habit 15): every import points down the data flow, no two modules
//! import each other.
//!
//! The graph is read from `src/` with `syn`: every `use` and every path that starts with `crate`, `super`,
//! `self` or a child module's name is an edge from the file it is written in to the file that defines the
//! item (a `pub use` in a `mod.rs` is followed to the file it re-exports). A parent (`mod.rs`) declares and
//! wires its children, so its imports of them are not edges. Test code (`#[cfg(test)]`) is left out: a unit
//! test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::Visit;

/// The top-level modules, from the top of the data flow (entry points) down to the leaves. A module
/// may import only modules in later layers; modules of one layer do not import each other.
const LAYERS: &[&[&str]] = &[
    &["app"],
    &["cli"],
    &["controller"],
    &["api", "health"],
    &["admission"],
    &["reconcile"],
    &["run"],
    &["remote", "vars", "proxy", "sharding", "plan", "rbac"],
    &["cached"],
    &["status"],
    &["runner", "leader"],
    &["executor", "history"],
    &["metrics", "recorder", "outcome", "watches"],
    &["logging", "access", "decoded", "http_server", "tls", "scenario"],
    &["telemetry"],
    &[
        "job_event",
        "executor_mode",
        "kubeapi",
        "template",
        "go_duration",
        "watch_errors",
        "toolchain",
        "proptest_support",
        "mask",
        "ident",
        "rate",
        "cgroup",
    ],
];

/// A file's module path, e.g. `["reconcile", "decide"]`; `lib.rs` and `main.rs` are the crate root `[]`.
type ModulePath = Vec<String>;

struct SourceFile {
    syntax: syn::File,
    /// `mod.rs` (or the crate root): its children live in its directory.
    is_parent: bool,
}

fn source_files() -> BTreeMap<ModulePath, SourceFile> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("read src/ entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap().with_extension("");
            let mut module: ModulePath =
                relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            let is_parent = matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main"));
            if module.last().is_some_and(|last| last == "mod")
                || matches!(module.as_slice(), [root] if root == "lib" || root == "main")
            {
                module.pop();
            }
            if module.is_empty() && path.ends_with("main.rs") {
                continue; // the binary: parses and delegates to the library
            }
            let text = std::fs::read_to_string(&path).expect("read source file");
            let syntax = syn::parse_file(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            files.insert(module, SourceFile { syntax, is_parent });
        }
    }
    let test_only: Vec<ModulePath> = files
        .iter()
        .flat_map(|(module, file)| {
            file.syntax.items.iter().filter_map(move |item| match item {
                syn::Item::Mod(declared) if declared.content.is_none() && is_test_only(&declared.attrs) => {
                    Some(child(module, &declared.ident.to_string()))
                }
                _ => None,
            })
        })
        .collect();
    for module in test_only {
        files.remove(&module);
    }
    files
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr.meta.require_list().is_ok_and(|list| list.tokens.to_string() == "test")
    })
}

/// Collects the paths a file names, skipping test-only items.
#[derive(Default)]
struct Paths {
    paths: Vec<Vec<String>>,
}

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.push_use(prefix, &name.ident),
            syn::UseTree::Rename(rename) => self.push_use(prefix, &rename.ident),
            syn::UseTree::Glob(_) => self.paths.push(prefix.clone()),
            syn::UseTree::Group(group) => group.items.iter().for_each(|item| self.use_tree(prefix, item)),
        }
    }

    fn push_use(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        self.paths.push(path);
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(item) => &item.attrs,
            syn::Item::Fn(item) => &item.attrs,
            syn::Item::Impl(item) => &item.attrs,
            syn::Item::Use(item) => &item.attrs,
            syn::Item::Struct(item) => &item.attrs,
            syn::Item::Enum(item) => &item.attrs,
            syn::Item::Const(item) => &item.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(crate)` and `pub(super)` name no item.
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.paths.push(path.segments.iter().map(|segment| segment.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }
}

/// What `pub use` in a parent file re-exports: item name → the path it names.
fn reexports(file: &syn::File) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    for item in &file.items {
        if let syn::Item::Use(item) = item
            && matches!(item.vis, syn::Visibility::Public(_) | syn::Visibility::Restricted(_))
        {
            let mut collected = Paths::default();
            collected.use_tree(&mut Vec::new(), &item.tree);
            for path in collected.paths {
                if let Some(last) = path.last() {
                    names.insert(last.clone(), path);
                }
            }
        }
    }
    names
}

struct Graph {
    files: BTreeMap<ModulePath, SourceFile>,
    reexports: BTreeMap<ModulePath, BTreeMap<String, Vec<String>>>,
}

impl Graph {
    fn new() -> Self {
        let files = source_files();
        let reexports = files
            .iter()
            .filter(|(_, file)| file.is_parent)
            .map(|(module, file)| (module.clone(), reexports(&file.syntax)))
            .collect();
        Self { files, reexports }
    }

    /// The file that defines what `path` (written in `from`) names, if it is in this crate.
    fn resolve(&self, from: &ModulePath, path: &[String]) -> Option<ModulePath> {
        let from_file = &self.files[from];
        let (mut base, rest): (ModulePath, &[String]) = match path.first().map(String::as_str)? {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (from.clone(), &path[1..]),
            "super" => {
                let mut base = from.clone();
                let mut rest = path;
                while rest.first().is_some_and(|segment| segment == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            first if from_file.is_parent && self.files.contains_key(&child(from, first)) => {
                (from.clone(), path)
            }
            _ => return None,
        };
        for (depth, segment) in rest.iter().enumerate() {
            let next = child(&base, segment);
            if self.files.contains_key(&next) {
                base = next;
                continue;
            }
            // `segment` is an item of `base`: follow a re-export to the file that defines it.
            if let Some(target) = self.reexports.get(&base).and_then(|names| names.get(segment))
                && target.last() == Some(segment)
                && target.first().is_some_and(|first| first != segment)
            {
                let mut followed = target.clone();
                followed.extend(rest[depth + 1..].iter().cloned());
                if let Some(resolved) = self.resolve(&base, &followed) {
                    return Some(resolved);
                }
            }
            break;
        }
        Some(base)
    }

    /// File-level import edges of non-test code; a parent's edges to its own children are left out (a parent
    /// declares and wires its children).
    fn edges(&self) -> BTreeSet<(ModulePath, ModulePath)> {
        let mut edges = BTreeSet::new();
        for (module, file) in &self.files {
            let mut paths = Paths::default();
            paths.visit_file(&file.syntax);
            for path in paths.paths {
                let Some(target) = self.resolve(module, &path) else { continue };
                if target != *module && !(file.is_parent && target.starts_with(module)) {
                    edges.insert((module.clone(), target));
                }
            }
        }
        edges
    }
}

fn child(parent: &ModulePath, name: &str) -> ModulePath {
    let mut child = parent.clone();
    child.push(name.to_owned());
    child
}

fn show(module: &ModulePath) -> String {
    if module.is_empty() { "crate".to_owned() } else { module.join("::") }
}

/// Strongly connected components with more than one member (Tarjan).
fn cycles<N: Ord + Clone>(edges: &BTreeSet<(N, N)>) -> Vec<Vec<N>> {
    let mut nodes: BTreeMap<N, Vec<N>> = BTreeMap::new();
    for (from, to) in edges {
        nodes.entry(from.clone()).or_default().push(to.clone());
        nodes.entry(to.clone()).or_default();
    }
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        found: Vec<Vec<N>>,
    }
    fn connect<N: Ord + Clone>(node: &N, nodes: &BTreeMap<N, Vec<N>>, state: &mut State<N>) {
        let index = state.index.len();
        state.index.insert(node.clone(), index);
        state.low.insert(node.clone(), index);
        state.stack.push(node.clone());
        for next in &nodes[node] {
            if !state.index.contains_key(next) {
                connect(next, nodes, state);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node.clone(), low);
            } else if state.stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node.clone(), low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                let done = member == *node;
                component.push(member);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state =
        State { index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for node in nodes.keys() {
        if !state.index.contains_key(node) {
            connect(node, &nodes, &mut state);
        }
    }
    state.found
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn every_top_level_module_has_a_layer() {
    let graph = Graph::new();
    let missing: BTreeSet<&str> = graph
        .files
        .keys()
        .filter_map(|module| module.first().map(String::as_str))
        .filter(|module| layer_of(module).is_none())
        .collect();
    assert!(missing.is_empty(), "add these modules to LAYERS in {}: {missing:?}", file!());
}

#[test]
fn every_import_between_top_level_modules_points_down() {
    let graph = Graph::new();
    let mut upward = Vec::new();
    for (from, to) in graph.edges() {
        let (Some(from_top), Some(to_top)) = (from.first(), to.first()) else { continue };
        if from_top == to_top {
            continue;
        }
        let (Some(from_layer), Some(to_layer)) = (layer_of(from_top), layer_of(to_top)) else { continue };
        if to_layer <= from_layer {
            upward.push(format!("{} -> {}", show(&from), show(&to)));
        }
    }
    assert!(upward.is_empty(), "imports that do not point down the layers:\n  {}", upward.join("\n  "));
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let graph = Graph::new();
    let found = cycles(&graph.edges());
    let described: Vec<String> =
        found.iter().map(|cycle| cycle.iter().map(show).collect::<Vec<_>>().join(" <-> ")).collect();
    assert!(described.is_empty(), "import circles between files:\n  {}", described.join("\n  "));
}

#[test]
fn the_graph_sees_known_imports() {
    // Guards the reader itself: these edges exist, so a resolver that found none would fail here.
    let graph = Graph::new();
    let edges = graph.edges();
    let reconcile_uses_status = edges.iter().any(|(from, to)| {
        from.first().is_some_and(|m| m == "reconcile") && to.first().is_some_and(|m| m == "status")
    });
    assert!(reconcile_uses_status, "expected an edge reconcile -> status in {} edges", edges.len());
    assert!(edges.len() > 100, "only {} edges found", edges.len());
}

/// One door for every run: the runner and the proxy's credentials are reached only from `run/`,
/// where a permit's lane decides the credential a run gets (DESIGN.md, invariant 3).
#[test]
fn only_the_run_door_starts_a_run_or_issues_a_credential() {
    let doors: [(&[&str], &str); 2] =
        [(&["runner", "run"], "runner::run"), (&["credentials", "issue"], "issue")];
    let mut found = Vec::new();
    for (module, file) in source_files() {
        let owner = module.first().map(String::as_str);
        if matches!(owner, Some("run" | "runner" | "proxy")) {
            continue;
        }
        let mut paths = Paths::default();
        paths.visit_file(&file.syntax);
        for path in &paths.paths {
            for (ends, name) in doors {
                if path.ends_with(&ends.iter().map(|s| s.to_string()).collect::<Vec<_>>()) {
                    found.push(format!("{} names {name}", show(&module)));
                }
            }
        }
        // A method call (`.credentials().issue(..)`) names no path.
        let mut calls = MethodCalls::default();
        calls.visit_file(&file.syntax);
        if calls.0.iter().any(|method| method == "issue") {
            found.push(format!("{} calls issue", show(&module)));
        }
    }
    assert!(found.is_empty(), "runs start and credentials are issued only in src/run/: {found:?}");
}

/// The methods a file calls.
#[derive(Default)]
struct MethodCalls(Vec<String>);

impl<'ast> Visit<'ast> for MethodCalls {
    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        self.0.push(call.method.to_string());
        syn::visit::visit_expr_method_call(self, call);
    }
}
