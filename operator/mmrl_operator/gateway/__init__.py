"""The gateway in front of a shared server's vLLM, run from the operator's image in every ModelServer replica (an
image no job chooses): vLLM listens on loopback only, and the gateway on the server's port forwards the client paths
it allows, and serves the admin API (stage, check and load an adapter; unload; list) only to the holder of the
server's admin key. The contract with the operator is `mmrl_api.gateway_contract`. It imports neither kopf nor the
Kubernetes client: it only needs HTTP (aiohttp) and the shared API.
"""
