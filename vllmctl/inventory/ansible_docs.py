"""The "Ansible inventories" section of docs/inventory.md: how an Ansible estate's files and variables
become vllmctl hosts (rendered by docs.py with the rest of the reference)."""

ANSIBLE = """\
## Ansible inventories

Existing Ansible estates are read as they are, the way Ansible reads them: INI or YAML inventories, with the
`group_vars/` and `host_vars/` beside them (a file `NAME`, `NAME.yml`, `NAME.yaml` or `NAME.json`, or a
folder `NAME/` of such files read in sorted order), `:children` and `:vars` sections, host ranges
(`gpu[01:16]`, `host:2222`) and Ansible's variable precedence. Two ways to use one:

- `vllmctl facts hosts.ini` (or `validate`, `status`, ...) on the Ansible inventory itself: it has hosts
  and groups but no models, which is enough for `vllmctl facts`. A file is an Ansible inventory when it has
  none of vllmctl's top-level keys below, or when it is not YAML: like Ansible, vllmctl reads `.yml`,
  `.yaml` and `.json` files as YAML, a file without an extension as YAML or else INI (DeepOps' `inventory`),
  and any other file (`hosts.ini`) as INI.
- `ansible_inventory: hosts.ini` in a vllmctl inventory (relative to that file) imports its hosts and
  groups; the vllmctl inventory adds GPUs, engines and models. Imported hosts start from `defaults`; a host
  of the same name under `hosts:` is layered on top (e.g. to add `gpus`). A group under `groups:` may list
  Ansible groups, but may not reuse an Ansible group's name.

INI inventories are read by ansible-core's own `ini` plugin: install the extra with
`pip install 'vllmctl[ansible]'` (ansible-core 2.19 or later). YAML inventories and `group_vars/` files are
read by vllmctl's own YAML reader, so they need no Ansible and meet its YAML checks (duplicate keys, tags,
alias bombs). Tests compare the hosts, groups and variables with `ansible-inventory --list` on DeepOps- and
Kubespray-shaped estates (`tests/fixtures/ansible/`).

Variables, lowest precedence first (as Ansible documents it): the inventory's `all` vars; other groups'
inventory vars, shallower groups first, then by `ansible_group_priority`, then by name; `group_vars/all`;
`group_vars/GROUP` in the same group order; the host's own inventory vars; `host_vars/HOST`. Ansible
groups become vllmctl groups with their children's hosts included (`all` and `ungrouped` are not groups,
nor is a group named like a host). Names (hosts and groups) use letters, digits, `.`, `_` and `-`.

| Ansible variable | vllmctl setting |
|---|---|
| `ansible_host`, `ansible_ssh_host` | `address` |
| `ansible_port`, `ansible_ssh_port`, `host:PORT` | `ssh.port` (text such as `"2222"` is read as a number) |
| `ansible_user`, `ansible_ssh_user` | `ssh.user` |
| `ansible_ssh_private_key_file`, `ansible_private_key_file` | `ssh.identity_file` |
| `ansible_become` | `ssh.sudo` (`true`/`false`, or Ansible's `yes`, `no`, `on`, `off`, `1`, `0`, ...) |
| `ansible_ssh_common_args: -o ProxyJump=[user@]host[:port]` (or `-J ...`) | `ssh.jump_host` |
| `ansible_ssh_common_args: -o ProxyCommand="ssh -W %h:%p [user@]host"` | `ssh.jump_host` |
| any other `ansible_*` variable | ignored (interpreters, passwords, ...: vllmctl never reads them) |
| every other variable | the host's `vars` |

Every value meets exactly the checks the native setting meets (see "How settings combine" and
docs/security.md), and each problem is reported at the file, line and column that set it: the INI line
(`hosts.ini:12:14: [gpus:vars].ansible_user: ...`), the `group_vars` or `host_vars` file, or the YAML key.
A ProxyCommand may add `-q`, `-p PORT` and `-l USER` (DeepOps writes
`'-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"'`). Other `-o` options in `ansible_ssh_common_args`
(`StrictHostKeyChecking=no`, ...) are ignored: host keys follow only `known_hosts` and `strict_host_keys`;
a ProxyCommand other than `ssh -W %h:%p` and options that take other arguments (`-F`, `-i`, ...) are
refused. The bastion is reached with the host's key and, when the command names no user, the host's user.
vllmctl never decrypts Ansible Vault: a Vault-encrypted file (`$ANSIBLE_VAULT;...`) or value (`!vault`, or
an INI value starting `$ANSIBLE_VAULT`) that vllmctl would read is refused with its location; vllmctl's own
secrets go under `secrets:`. Host ranges in INI and YAML inventories are expanded by ansible-core
(`vllmctl[ansible]`), exactly as Ansible expands them; a range it refuses is reported at its key.
"""
