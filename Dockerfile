# One image for everything in docker-compose.yml: ZooKeeper (Debian's
# zookeeper package), zklock-detector, the zklock CLI, fenced-store and the
# demo. Built from Debian packages only, exactly as on a developer machine:
#   docker build -t zklock .
FROM debian:bookworm

ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src

# Dependencies first, so editing the sources does not reinstall them.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps && rm -rf /var/lib/apt/lists/*

COPY . .
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
          -DZKLOCK_BUILD_TESTS=OFF -DZKLOCK_BUILD_BENCH=OFF \
 && cmake --build build -j"$(nproc)" \
 && cmake --install build --prefix /usr/local

# scripts/demo finds the build here and skips the build step.
ENV ZKLOCK_BUILD_DIR=/src/build
# zklock-detector metrics; ZooKeeper client port.
EXPOSE 9464 2181
CMD ["zklock", "--help"]
