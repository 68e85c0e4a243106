# cluster/ parsing and environment resolvers, and hvdrun (launcher/). Included by
# tests/unit/CMakeLists.txt. No MPI is linked; test_launcher_cli runs the real hvdrun binary,
# which execs the real mpirun for the exit-status and environment checks.
hvd_add_unit_test(test_cluster_hostlist test_cluster_hostlist.cc LIBS hvd_cluster)
hvd_add_unit_test(test_cluster_hostfile test_cluster_hostfile.cc LIBS hvd_cluster)
hvd_add_unit_test(test_cluster_env_resolver test_cluster_env_resolver.cc LIBS hvd_cluster)
hvd_add_unit_test(test_launcher_plan test_launcher_plan.cc LIBS hvd_launcher)
hvd_add_unit_test(test_launcher_cli test_launcher_cli.cc LIBS hvd_launcher TIMEOUT 180)
target_compile_definitions(test_launcher_cli PRIVATE HVDRUN_PATH="$<TARGET_FILE:hvdrun>")
add_dependencies(test_launcher_cli hvdrun)
