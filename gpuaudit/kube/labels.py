"""Well-known node labels."""

HOSTNAME_LABEL = "kubernetes.io/hostname"
