"""Instance groups of a SageMaker heterogeneous cluster (sharding/groups.py) and the topology that knows them."""
from __future__ import annotations

import json

import pytest

from converters.util.errors import TfpipeError
from sharding import InstanceGroup, InstanceGroups, Topology, service_address
from sharding.groups import parse_instance_groups


def hetero(current_host="algo-1", current_group="dnn_group", data_hosts=("algo-2", "algo-3"), **extra):
    """A heterogeneous cluster's resourceconfig.json: one GPU host (algo-1) and the data group."""
    return {"current_host": current_host, "current_group_name": current_group,
            "hosts": ["algo-1", *data_hosts], "network_interface_name": "eth0",
            "instance_groups": [
                {"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge", "hosts": list(data_hosts)},
                {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-1"]}],
            **extra}


@pytest.mark.parametrize("config, current_group, data_hosts, dnn_hosts", [
    (hetero(), "dnn_group", ("algo-2", "algo-3"), ("algo-1",)),
    (hetero("algo-3", "data_group"), "data_group", ("algo-2", "algo-3"), ("algo-1",)),
    (hetero("algo-3", None), "data_group", ("algo-2", "algo-3"), ("algo-1",)),       # group found from the host
    (hetero("algo-2", "data_group", data_hosts=("algo-3", "algo-2")), "data_group", ("algo-3", "algo-2"),
     ("algo-1",)),                                                                    # SageMaker's order is kept
])
def test_parse_instance_groups(config, current_group, data_hosts, dnn_hosts):
    groups = parse_instance_groups(config, "rc.json")
    assert groups.current_group == current_group
    assert groups.current_host == config["current_host"]
    assert groups.hosts_of("data_group") == data_hosts and groups.hosts_of("dnn_group") == dnn_hosts
    assert groups.names == ("data_group", "dnn_group")
    assert groups.group("data_group").instance_type == "ml.c5.18xlarge"


def test_homogeneous_cluster_has_no_groups():
    assert parse_instance_groups({"current_host": "algo-1", "hosts": ["algo-1"]}, "rc.json") is None
    assert parse_instance_groups({"instance_groups": []}, "rc.json") is None


@pytest.mark.parametrize("config, match", [
    ({"instance_groups": {"a": 1}}, r"rc.json: 'instance_groups' must be a list"),
    ({"instance_groups": [{"hosts": ["algo-1"]}]}, r"rc.json: instance_groups\[0\] must be an object"),
    ({"instance_groups": [{"instance_group_name": "g", "hosts": "algo-1"}]}, r"instance_groups\[0\] 'hosts' must"),
    ({"instance_groups": [{"instance_group_name": "g", "hosts": []}]}, r"instance_groups\[0\]: .*'g' has no hosts"),
    ({"instance_groups": [{"instance_group_name": "", "hosts": ["a"]}]}, r"name must be a non-empty string"),
    ({"instance_groups": [{"instance_group_name": "g", "hosts": ["a", "a"]}]}, r"'g' lists a host twice"),
    ({"instance_groups": [{"instance_group_name": "g", "hosts": ["a"]}, {"instance_group_name": "g", "hosts": ["b"]}]},
     r"rc.json: instance group names must be unique"),
    ({"instance_groups": [{"instance_group_name": "g", "hosts": ["a"]}, {"instance_group_name": "h", "hosts": ["a"]}]},
     r"host 'a' is in two instance groups: 'g' and 'h'"),
    (hetero(current_group="gpu"), r"current group 'gpu' is not one of the instance groups"),
    (hetero(current_host="algo-9"), r"current host 'algo-9' is in no instance group"),
    (hetero(current_host="algo-2"), r"current host 'algo-2' is in group 'data_group', not in the current group "
                                    r"'dnn_group'"),
])
def test_bad_groups_name_the_file_and_entry(config, match):
    with pytest.raises(TfpipeError, match=match):
        parse_instance_groups(config, "rc.json")


def test_unknown_group_lists_the_groups():
    groups = parse_instance_groups(hetero(), "rc.json")
    with pytest.raises(TfpipeError, match=r"no instance group 'cpu': the cluster has data_group, dnn_group"):
        groups.hosts_of("cpu")


@pytest.mark.parametrize("data_hosts, port, addresses, expected", [
    (("algo-2", "algo-3"), 5050, None, "grpc://algo-2:5050"),
    (("algo-3", "algo-2"), 6000, None, "grpc://algo-3:6000"),
    (("algo-2",), 7000, {"algo-2": "127.0.0.1"}, "grpc://127.0.0.1:7000"),
    (("algo-2",), 7000, {"algo-9": "127.0.0.1"}, "grpc://algo-2:7000"),
])
def test_service_address_is_the_first_data_host(data_hosts, port, addresses, expected):
    groups = parse_instance_groups(hetero(data_hosts=data_hosts), "rc.json")
    assert service_address(groups, "data_group", port, addresses=addresses) == expected


@pytest.mark.parametrize("port", [0, 65536, -1, "5050", True])
def test_service_address_refuses_a_bad_port(port):
    groups = parse_instance_groups(hetero(), "rc.json")
    with pytest.raises(ValueError, match="port must be a TCP port in"):
        service_address(groups, "data_group", port)


@pytest.mark.parametrize("kwargs, match", [
    (dict(groups=()), "groups must be a non-empty list"),
    (dict(groups=(InstanceGroup("g", ("a",)),), current_group="h"), "current group 'h' is not one of"),
])
def test_instance_groups_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InstanceGroups(**kwargs)


# -- the topology of a heterogeneous cluster ----------------------------------------------------------------

@pytest.mark.parametrize("config, env, hosts, current_group, rank", [
    (hetero(), {}, ("algo-1",), "dnn_group", 0),                         # the GPU host's world is its group
    (hetero("algo-3", "data_group"), {}, ("algo-2", "algo-3"), "data_group", 1),
    (hetero(), {"SM_HOSTS": json.dumps(["algo-1", "algo-2", "algo-3"])}, ("algo-1",), "dnn_group", 0),
    ({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}, {}, ("algo-1", "algo-2"), None, 1),  # homogeneous
])
def test_topology_learns_instance_groups(tmp_path, config, env, hosts, current_group, rank):
    (tmp_path / "resourceconfig.json").write_text(json.dumps(config))
    topo = Topology.from_env(env, config_dir=str(tmp_path), processing_config_dir=None)
    assert topo.hosts == hosts and topo.current_group == current_group and topo.rank == rank
    assert (topo.instance_groups is None) == (current_group is None)
    assert topo.to_json()["instance_groups"] == (None if current_group is None else topo.instance_groups.to_json())


def test_topology_names_a_bad_group_file(tmp_path):
    (tmp_path / "resourceconfig.json").write_text(json.dumps(hetero(current_host="algo-9")))
    with pytest.raises(TfpipeError, match=r"resourceconfig.json: current host 'algo-9' is in no instance group"):
        Topology.from_env({}, config_dir=str(tmp_path), processing_config_dir=None)


def test_topology_refuses_a_non_groups_value():
    with pytest.raises(ValueError, match="instance_groups must be an InstanceGroups"):
        Topology(instance_groups={"data_group": ["algo-2"]})
