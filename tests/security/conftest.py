"""The real sshd, Slurm and a tiny model's home, for the multi-node secret tests."""

from tests.integration.test_launch_host import home  # noqa: F401 (fixture)
from tests.integration.test_multinode_slurm import slurm  # noqa: F401 (fixture)
from tests.integration.test_multinode_ssh import ssh_keys, sshd_port  # noqa: F401 (fixtures)
