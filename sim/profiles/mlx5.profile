# The simulator's mlx5 profile: the strict profile with what mlx5's provider does differently,
# from its source (rdma-core providers/mlx5). Not measured on a device: capture a NIC's own
# profile with verbsim-probe (docs/FIDELITY.md, "Profile files").
base = strict
name = mlx5
family = mlx5
post_send_needs_rts = false   # mlx5 does not check the QP's state on post
ud_ah_pd_checked = false      # the AV is copied into the WQE; nothing names a PD
