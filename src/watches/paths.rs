//! Where a watch's playbook or role lives: upstream's lookup order, resolved to absolute paths.

use std::path::{Component, Path, PathBuf};

use super::error::{EntryRef, Error};
use super::{Environment, Target};

/// Why a playbook/role pair names nothing runnable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Unresolved {
    /// The playbook path does not exist.
    PlaybookNotFound(PathBuf),
    /// No candidate path for the role exists; all of them, in lookup order.
    RoleNotFound { role: String, tried: Vec<PathBuf> },
    /// Neither a playbook nor a role was given.
    Neither,
}

impl Unresolved {
    /// The error for a playbook or role that names nothing runnable; `fields` are the names of the
    /// playbook and role fields it came from.
    pub(super) fn into_error(self, at: &EntryRef, fields: (&'static str, &'static str)) -> Error {
        match self {
            Unresolved::PlaybookNotFound(path) => {
                Error::PlaybookNotFound { at: at.boxed(), field: fields.0, path }
            }
            Unresolved::RoleNotFound { role, tried } => {
                Error::RoleNotFound { at: at.boxed(), field: fields.1, role, tried }
            }
            Unresolved::Neither => Error::NoTarget { at: at.boxed() },
        }
    }
}

/// Resolves a `playbook`/`role` pair (empty strings count as absent); the playbook wins if both are set.
pub(super) fn resolve(playbook: &str, role: &str, env: &Environment) -> Result<Target, Unresolved> {
    if !playbook.is_empty() {
        let path = absolute(Path::new(playbook), env);
        return if path.exists() {
            Ok(Target::Playbook(path))
        } else {
            Err(Unresolved::PlaybookNotFound(path))
        };
    }
    if !role.is_empty() {
        let tried = role_candidates(role, env);
        return match tried.iter().find(|path| path.exists()) {
            Some(found) => Ok(Target::Role(found.clone())),
            None => Err(Unresolved::RoleNotFound { role: role.to_string(), tried }),
        };
    }
    Err(Unresolved::Neither)
}

/// Every place a role may be, in upstream's order: an absolute path as is; otherwise an FQCN
/// `ns.coll.role` under each `ANSIBLE_COLLECTIONS_PATH` entry, then `P/<role>` and `P/roles/<role>`
/// for each `ANSIBLE_ROLES_PATH` entry, then `CWD/roles/<role>`.
pub(super) fn role_candidates(role: &str, env: &Environment) -> Vec<PathBuf> {
    if Path::new(role).is_absolute() {
        return vec![clean(Path::new(role))];
    }
    let mut candidates = Vec::new();
    let parts: Vec<&str> = role.split('.').collect();
    if let [namespace, collection, name] = parts[..] {
        for parent in collections_path(env) {
            let path = Path::new(&parent).join("ansible_collections").join(namespace).join(collection);
            candidates.push(absolute(&path.join("roles").join(name), env));
        }
    }
    if let Some(roles_path) = env.var("ANSIBLE_ROLES_PATH").filter(|value| !value.is_empty()) {
        for parent in roles_path.split(':') {
            candidates.push(absolute(&Path::new(parent).join(role), env));
            candidates.push(absolute(&Path::new(parent).join("roles").join(role), env));
        }
    }
    candidates.push(absolute(&Path::new("roles").join(role), env));
    candidates
}

/// `ANSIBLE_COLLECTIONS_PATH` split on `:`, or Ansible's default when unset or empty.
fn collections_path(env: &Environment) -> Vec<String> {
    match env.var("ANSIBLE_COLLECTIONS_PATH").filter(|value| !value.is_empty()) {
        Some(value) => value.split(':').map(str::to_string).collect(),
        None => {
            let mut paths = vec!["/usr/share/ansible/collections".to_string()];
            if let Some(home) = env.home() {
                paths.push(home.join(".ansible/collections").display().to_string());
            }
            paths
        }
    }
}

/// `path` made absolute against the environment's working directory and cleaned lexically, as Go's
/// `filepath.Join` leaves it.
fn absolute(path: &Path, env: &Environment) -> PathBuf {
    clean(&env.cwd().join(path))
}

/// Lexical clean-up in the manner of Go's `filepath.Clean`: drops `.` and resolves `..` textually.
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watches::test_support::TempDir;

    #[test]
    fn relative_playbook_is_joined_onto_the_working_directory() {
        let dir = TempDir::new();
        dir.file("playbooks/site.yml");
        let env = Environment::new(dir.path());
        assert_eq!(
            resolve("./playbooks/site.yml", "", &env),
            Ok(Target::Playbook(dir.path().join("playbooks/site.yml")))
        );
    }

    #[test]
    fn missing_playbook_reports_the_absolute_path_checked() {
        let dir = TempDir::new();
        let env = Environment::new(dir.path());
        assert_eq!(
            resolve("nope.yml", "", &env),
            Err(Unresolved::PlaybookNotFound(dir.path().join("nope.yml")))
        );
    }

    #[test]
    fn playbook_wins_over_role_when_both_are_set() {
        let dir = TempDir::new();
        dir.file("site.yml");
        dir.dir("roles/memcached");
        let env = Environment::new(dir.path());
        assert_eq!(resolve("site.yml", "memcached", &env), Ok(Target::Playbook(dir.path().join("site.yml"))));
    }

    #[test]
    fn neither_playbook_nor_role_is_unresolved() {
        assert_eq!(resolve("", "", &Environment::new("/")), Err(Unresolved::Neither));
    }

    #[test]
    fn role_is_found_under_the_working_directory_roles_folder() {
        let dir = TempDir::new();
        dir.dir("roles/memcached");
        let env = Environment::new(dir.path());
        assert_eq!(resolve("", "memcached", &env), Ok(Target::Role(dir.path().join("roles/memcached"))));
    }

    #[test]
    fn absolute_role_path_is_used_as_is() {
        let dir = TempDir::new();
        dir.dir("elsewhere/myrole");
        let role = dir.path().join("elsewhere/myrole");
        let role_text = role.display().to_string();
        assert_eq!(resolve("", &role_text, &Environment::new("/")), Ok(Target::Role(role.clone())));
        assert_eq!(role_candidates(&role_text, &Environment::new("/")), [role]);
    }

    #[test]
    fn fqcn_role_is_found_in_the_collections_path_first() {
        let dir = TempDir::new();
        dir.dir("colls/ansible_collections/acme/cache/roles/memcached");
        dir.dir("roles/acme.cache.memcached");
        let colls = dir.path().join("colls").display().to_string();
        let env = Environment::new(dir.path())
            .with_var("ANSIBLE_COLLECTIONS_PATH", format!("/nonexistent:{colls}"));
        let expected = dir.path().join("colls/ansible_collections/acme/cache/roles/memcached");
        assert_eq!(resolve("", "acme.cache.memcached", &env), Ok(Target::Role(expected)));
    }

    #[test]
    fn collections_path_defaults_to_system_then_home_when_unset_or_empty() {
        let env = Environment::new("/work").with_home("/home/op");
        let expected = [
            "/usr/share/ansible/collections/ansible_collections/acme/cache/roles/memcached",
            "/home/op/.ansible/collections/ansible_collections/acme/cache/roles/memcached",
            "/work/roles/acme.cache.memcached",
        ]
        .map(PathBuf::from);
        assert_eq!(role_candidates("acme.cache.memcached", &env), expected);
        let env = env.with_var("ANSIBLE_COLLECTIONS_PATH", "");
        assert_eq!(role_candidates("acme.cache.memcached", &env), expected);
    }

    #[test]
    fn collections_path_without_home_has_only_the_system_directory() {
        let candidates = role_candidates("a.b.c", &Environment::new("/work"));
        assert_eq!(
            candidates,
            ["/usr/share/ansible/collections/ansible_collections/a/b/roles/c", "/work/roles/a.b.c"]
                .map(PathBuf::from)
        );
    }

    #[test]
    fn only_names_with_exactly_three_dot_parts_are_looked_up_as_collections() {
        let env = Environment::new("/work").with_home("/home/op");
        assert_eq!(role_candidates("a.b", &env), [PathBuf::from("/work/roles/a.b")]);
        assert_eq!(role_candidates("a.b.c.d", &env), [PathBuf::from("/work/roles/a.b.c.d")]);
    }

    #[test]
    fn roles_path_entries_are_tried_with_and_without_a_roles_folder_before_the_working_directory() {
        let env = Environment::new("/work").with_var("ANSIBLE_ROLES_PATH", "/opt/a:rel");
        let expected = [
            "/opt/a/memcached",
            "/opt/a/roles/memcached",
            "/work/rel/memcached",
            "/work/rel/roles/memcached",
            "/work/roles/memcached",
        ]
        .map(PathBuf::from);
        assert_eq!(role_candidates("memcached", &env), expected);
    }

    #[test]
    fn first_existing_candidate_wins() {
        let dir = TempDir::new();
        dir.dir("second/roles/memcached");
        dir.dir("third/memcached");
        dir.dir("roles/memcached");
        let roles_path =
            ["first", "second", "third"].map(|p| dir.path().join(p).display().to_string()).join(":");
        let env = Environment::new(dir.path()).with_var("ANSIBLE_ROLES_PATH", roles_path);
        assert_eq!(
            resolve("", "memcached", &env),
            Ok(Target::Role(dir.path().join("second/roles/memcached")))
        );
    }

    #[test]
    fn missing_role_lists_every_path_tried() {
        let dir = TempDir::new();
        let env = Environment::new(dir.path()).with_var("ANSIBLE_ROLES_PATH", "/opt/r");
        let Err(Unresolved::RoleNotFound { role, tried }) = resolve("", "gone", &env) else {
            panic!("role should be missing");
        };
        assert_eq!(role, "gone");
        assert_eq!(
            tried,
            [PathBuf::from("/opt/r/gone"), PathBuf::from("/opt/r/roles/gone"), dir.path().join("roles/gone")]
        );
    }

    #[test]
    fn paths_are_cleaned_like_go_filepath_join() {
        let env = Environment::new("/work/sub");
        assert_eq!(absolute(Path::new("./a/../b/./c.yml"), &env), PathBuf::from("/work/sub/b/c.yml"));
        assert_eq!(absolute(Path::new("../x"), &env), PathBuf::from("/work/x"));
    }
}
