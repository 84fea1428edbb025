# gpuaudit container image: the CLI, its rules and patch templates, nothing else.
#   docker build -t ghcr.io/gpuaudit/gpuaudit:0.1.0 .
# Used by deploy/ (CronJobs, the optional NVML sampler), so it installs every
# extra ([all]: cluster, nvml, report, fix). Dependencies are the
# exact versions in constraints.txt (scripts/gen_constraints.py), the ones the
# tests ran with.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY gpuaudit ./gpuaudit
COPY policies ./policies
COPY remediations ./remediations
RUN pip install --constraint constraints.txt '.[all]' \
 && rm -rf /src

# A fixed, unprivileged user: deploy/ runs as 10001 with a read-only root
# filesystem, writing only to its volumes and /tmp.
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin gpuaudit
USER 10001:10001
WORKDIR /tmp

ENTRYPOINT ["gpuaudit"]
CMD ["--help"]
